//! Container log lines as the runtimes write them: CRI (`<RFC3339Nano> <stdout|stderr>
//! <P|F> <content>`, by containerd and CRI-O) and docker's json-file driver.

use std::borrow::Cow;

use opscope_model::timestamp::parse_rfc3339;

/// The output stream a line was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn name(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "stdout" => Some(Self::Stdout),
            "stderr" => Some(Self::Stderr),
            _ => None,
        }
    }
}

/// One line of a container log file: a piece of what the container wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLine<'a> {
    /// When the runtime read it from the container, in nanoseconds since the epoch.
    pub time_unix_nano: u64,
    pub stream: Stream,
    /// More pieces of the same record follow (CRI `P`; docker without a final newline).
    pub partial: bool,
    /// What the container wrote, without the newline.
    pub content: Cow<'a, str>,
}

/// A CRI or docker json-file line; `None` when it is neither.
pub fn parse_container_line(line: &str) -> Option<ContainerLine<'_>> {
    parse_cri(line).or_else(|| parse_docker(line))
}

/// `<RFC3339Nano> <stdout|stderr> <P|F> <content>`: containerd writes the fraction
/// trimmed with `Z` (`…00.5Z`), CRI-O nine digits and an offset (`…00.500000000+02:00`).
pub fn parse_cri(line: &str) -> Option<ContainerLine<'_>> {
    let (time, rest) = line.split_once(' ')?;
    let (stream, rest) = rest.split_once(' ')?;
    let (tag, content) = rest.split_once(' ').unwrap_or((rest, ""));
    let partial = match tag {
        "P" => true,
        "F" => false,
        _ => return None,
    };
    Some(ContainerLine {
        time_unix_nano: parse_rfc3339(time)?,
        stream: Stream::parse(stream)?,
        partial,
        content: Cow::Borrowed(content),
    })
}

/// `{"log":"...\n","stream":"stdout","time":"..."}`; docker splits lines longer than
/// 16 KiB into entries whose `log` has no final newline.
pub fn parse_docker(line: &str) -> Option<ContainerLine<'static>> {
    #[derive(serde::Deserialize)]
    struct DockerLine {
        log: String,
        stream: String,
        time: String,
    }
    let looks_like_docker = line.trim_start().starts_with('{')
        && line.contains("\"log\"")
        && line.contains("\"stream\"");
    if !looks_like_docker {
        return None;
    }
    let docker: DockerLine = serde_json::from_str(line).ok()?;
    let (content, partial) = match docker.log.strip_suffix('\n') {
        Some(content) => (content.to_string(), false),
        None => (docker.log, true),
    };
    Some(ContainerLine {
        time_unix_nano: parse_rfc3339(&docker.time)?,
        stream: Stream::parse(&docker.stream)?,
        partial,
        content: Cow::Owned(content),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOON: u64 = 1_714_564_800_000_000_000;

    #[test]
    fn containerd_trims_the_fraction_and_writes_z() {
        let line = parse_container_line(r#"2024-05-01T12:00:00.5Z stdout F {"level":"info"}"#)
            .expect("a containerd line");
        assert_eq!(line.time_unix_nano, NOON + 500_000_000);
        assert_eq!(line.stream, Stream::Stdout);
        assert!(!line.partial);
        assert_eq!(line.content, r#"{"level":"info"}"#);
    }

    #[test]
    fn cri_o_writes_nine_digits_and_an_offset() {
        let line = parse_container_line("2024-05-01T14:00:00.000000123+02:00 stderr P first half")
            .expect("a CRI-O line");
        assert_eq!(line.time_unix_nano, NOON + 123);
        assert_eq!(line.stream, Stream::Stderr);
        assert!(line.partial);
        assert_eq!(line.content, "first half");
    }

    #[test]
    fn content_keeps_its_spaces_and_may_be_empty() {
        let line = parse_cri("2024-05-01T12:00:00Z stdout F  two  spaces ").expect("a CRI line");
        assert_eq!(line.content, " two  spaces ");
        assert_eq!(
            parse_cri("2024-05-01T12:00:00Z stdout F").map(|l| l.content),
            Some("".into())
        );
        assert_eq!(
            parse_cri("2024-05-01T12:00:00Z stdout F ").map(|l| l.content),
            Some("".into())
        );
    }

    #[test]
    fn docker_json_file_lines() {
        let whole = r#"{"log":"I0501 12:00:00.000000 1 main.go:1] hi\n","stream":"stderr","time":"2024-05-01T12:00:00.5Z"}"#;
        let line = parse_container_line(whole).expect("a docker line");
        assert_eq!(line.content, "I0501 12:00:00.000000 1 main.go:1] hi");
        assert_eq!(line.stream, Stream::Stderr);
        assert!(!line.partial);
        let piece = r#"{"log":"first 16 KiB","stream":"stdout","time":"2024-05-01T12:00:00Z"}"#;
        assert!(parse_container_line(piece).is_some_and(|l| l.partial));
    }

    #[test]
    fn other_lines_are_not_container_lines() {
        for bad in [
            "",
            "plain words from an operator",
            "2024-05-01T12:00:00Z stdin F x",
            "2024-05-01T12:00:00Z stdout X x",
            "2024-13-01T12:00:00Z stdout F x",
            "yesterday stdout F x",
            "2024-05-01T12:00:00Z",
            r#"{"level":"info","msg":"x"}"#,
            r#"{"log":"x","stream":"stdout","time":"soon"}"#,
            r#"{"log":"x","stream":"stdout","time":"2024-05-01T12:00:00Z""#,
        ] {
            assert_eq!(parse_container_line(bad), None, "{bad:?}");
        }
    }
}
