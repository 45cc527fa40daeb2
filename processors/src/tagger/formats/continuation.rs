//! Stack-trace lines, which belong to the log record before them: Go's (zap prints a
//! trace after a console `ERROR` line; a panic prints goroutines and frames) and
//! Java's (an exception, its `at` frames and causes after a log4j `ERROR` line).

/// Whether `line` continues the previous record: a Go stack-trace line such as
/// `\t/go/pkg/mod/…/controller.go:329 +0x1d`, a frame's function
/// (`sigs.k8s.io/…/controller.(*Controller).reconcileHandler`, `main.main()`,
/// `created by …`) or a `goroutine 1 [running]:` header.
pub fn is_continuation(line: &str) -> bool {
    let line = line.trim_end();
    is_source_position_line(line)
        || is_goroutine_header(line)
        || is_function_line(line)
        || is_java_frame_line(line)
        || is_java_exception_line(line)
}

/// An indented `at pkg.Class.method(File.java:123)` frame, or `... 12 more`.
fn is_java_frame_line(line: &str) -> bool {
    let frame = line.trim_start();
    if frame.len() == line.len() {
        return false;
    }
    if let Some(count) = frame
        .strip_prefix("... ")
        .and_then(|rest| rest.strip_suffix(" more"))
    {
        return is_number(count);
    }
    frame.strip_prefix("at ").is_some_and(|call| {
        call.ends_with(')')
            && call
                .split_once('(')
                .is_some_and(|(method, _)| method.contains('.') && !method.contains(' '))
    })
}

/// `io.fabric8.kubernetes.client.KubernetesClientException: Failure executing: …`, or
/// `Caused by: …`: a Java exception's class, package-qualified, and its message.
fn is_java_exception_line(line: &str) -> bool {
    let line = line.strip_prefix("Caused by: ").unwrap_or(line);
    let class = line.split(": ").next().unwrap_or(line);
    let simple = class.rsplit('.').next().unwrap_or(class);
    class.contains('.')
        && (simple.ends_with("Exception") || simple.ends_with("Error"))
        && class
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'$'))
}

/// Whether `token` is a Go caller or frame position, `path/file.go:123`.
pub fn is_go_source_position(token: &str) -> bool {
    token
        .rsplit_once(".go:")
        .is_some_and(|(path, line)| !path.is_empty() && is_number(line))
}

/// An indented `/path/file.go:123` with an optional `+0x1d` program-counter offset.
fn is_source_position_line(line: &str) -> bool {
    let position = line.trim_start();
    if position.len() == line.len() {
        return false;
    }
    let mut words = position.split_whitespace();
    let is_position = words.next().is_some_and(is_go_source_position);
    let offset_or_nothing = words.next().is_none_or(|offset| offset.starts_with("+0x"));
    is_position && offset_or_nothing && words.next().is_none()
}

/// `goroutine 7 [running]:`, `goroutine 7 [chan receive, 2 minutes]:`.
fn is_goroutine_header(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("goroutine ") else {
        return false;
    };
    rest.split_once(" [")
        .is_some_and(|(id, state)| is_number(id) && state.ends_with("]:"))
}

/// A frame's function: an import path with a symbol, optionally with the call's
/// arguments (panics print them, zap does not), or `created by <function>`.
fn is_function_line(line: &str) -> bool {
    if line.starts_with(char::is_whitespace) {
        return false;
    }
    let function = match line.strip_prefix("created by ") {
        Some(creator) => creator.split(" in goroutine ").next().unwrap_or(creator),
        None => line,
    };
    match strip_call_arguments(function) {
        Some("panic") => true,
        Some(symbol) => is_go_symbol(symbol),
        None => is_go_symbol(function) && (function.contains('/') || function.starts_with("main.")),
    }
}

/// `pkg.Func(0xc000123, {0x1, 0x2})` → `pkg.Func`; `None` without a call's arguments
/// (a method receiver such as `.(*Controller)` is not a call).
fn strip_call_arguments(function: &str) -> Option<&str> {
    let open = function.strip_suffix(')')?.rfind('(')?;
    let symbol = function.get(..open)?;
    (!symbol.is_empty() && !symbol.ends_with('.')).then_some(symbol)
}

/// A Go symbol as stack traces spell it: an import path, a package-qualified name,
/// receivers `(*T)`, closures `func1`, generics `[...]`.
fn is_go_symbol(symbol: &str) -> bool {
    let last_segment = symbol.rsplit('/').next().unwrap_or(symbol);
    symbol.starts_with(|c: char| c.is_alphabetic() || c == '_')
        && last_segment.contains('.')
        && !symbol.ends_with(".go")
        && symbol
            .chars()
            .all(|c| c.is_alphanumeric() || "_./*()-~%+[]".contains(c))
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zap_stack_trace_lines() {
        for line in [
            "sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller).reconcileHandler",
            "\t/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.17.2/pkg/internal/controller/controller.go:329",
            "sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller).Start.func2.2",
            "github.com/go-logr/zapr.(*zapLogger).Error",
            "        /src/vendor/github.com/go-logr/zapr/zapr.go:132",
            "k8s.io/apimachinery/pkg/util/wait.JitterUntil[...]",
        ] {
            assert!(is_continuation(line), "{line}");
        }
    }

    #[test]
    fn panic_trace_lines() {
        for line in [
            "goroutine 1 [running]:",
            "goroutine 214 [chan receive, 3 minutes]:",
            "main.main()",
            "\t/workspace/cmd/main.go:142 +0x6d",
            "panic({0x1a2b3c0?, 0x2c5e1f0?})",
            "example.com/op/internal/controller.(*RayJobReconciler).Reconcile(0xc0004a2d80, {0x1f3c2a8, 0xc000b3e1e0}, {{{0xc000a1c0f0, 0x2}, {0xc000a1c0f8, 0x5}}})",
            "created by sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller).Start.func2 in goroutine 115",
            "created by main.main",
        ] {
            assert!(is_continuation(line), "{line}");
        }
    }

    #[test]
    fn java_stack_trace_lines() {
        // https://github.com/operator-framework/java-operator-sdk/issues/1198
        for line in [
            "io.fabric8.kubernetes.client.KubernetesClientException: Failure executing: PUT at: https://address/apis/flink.apache.org/v1beta1/namespaces/myns/flinkdeployments/flink-job/status. Message: Operation cannot be fulfilled",
            "        at io.fabric8.kubernetes.client.dsl.base.OperationSupport.requestFailure(OperationSupport.java:682)",
            "\tat java.base/java.lang.Thread.run(Thread.java:829)",
            "Caused by: java.net.SocketTimeoutException: timeout",
            "\t... 12 more",
        ] {
            assert!(is_continuation(line), "{line}");
        }
        for line in [
            "Exception: not qualified",
            "  at the start of the day (again)",
            "org.Thing: a message",
        ] {
            assert!(!is_continuation(line), "{line}");
        }
    }

    #[test]
    fn log_lines_are_not_continuations() {
        for line in [
            "",
            "2024-05-01T12:00:00Z\tINFO\tStarting workers",
            "{\"level\":\"info\"}",
            "panic: runtime error: invalid memory address or nil pointer dereference",
            "Starting manager",
            "done.",
            "v1.2.3",
            "\tsome indented prose",
            "\tcontroller.go:12 extra words",
            "goroutine leak suspected",
            "main.go",
            "(*T).M()",
        ] {
            assert!(!is_continuation(line), "{line:?}");
        }
    }

    #[test]
    fn go_source_positions() {
        assert!(is_go_source_position("controller/rayjob_controller.go:88"));
        assert!(!is_go_source_position("controller.go:"));
        assert!(!is_go_source_position(".go:12"));
        assert!(!is_go_source_position("setup"));
    }
}
