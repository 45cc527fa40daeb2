//! Log severity as the recognised formats spell it (`info`, `ERROR`, klog's `I`/`W`/
//! `E`/`F`, zap's `Level(-5)` for verbose logr levels), with its OTLP severity number.

/// How severe a log record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

/// Level words, matched case-insensitively (zap, logfmt, tracing, logrus spellings).
const LEVEL_WORDS: &[(&str, Level)] = &[
    ("info", Level::Info),
    ("error", Level::Error),
    ("debug", Level::Debug),
    ("warn", Level::Warn),
    ("warning", Level::Warn),
    ("trace", Level::Trace),
    ("err", Level::Error),
    ("dpanic", Level::Error),
    ("panic", Level::Error),
    ("fatal", Level::Error),
    ("critical", Level::Error),
    ("notice", Level::Info),
];

impl Level {
    /// The level a level word names, case-insensitively; zap's `Level(-n)` (logr's
    /// `V(n)` beyond debug) is `Trace`.
    pub fn parse(word: &str) -> Option<Level> {
        LEVEL_WORDS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(word))
            .map(|(_, level)| *level)
            .or_else(|| Level::from_zap_verbosity(word))
    }

    fn from_zap_verbosity(word: &str) -> Option<Level> {
        let verbosity = word
            .get(..7)
            .filter(|prefix| prefix.eq_ignore_ascii_case("level(-"))
            .and_then(|_| word.get(7..))?
            .strip_suffix(')')?;
        verbosity.parse::<u8>().ok().map(|_| Level::Trace)
    }

    /// The level of klog's leading severity letter.
    pub fn from_klog_letter(letter: char) -> Option<Level> {
        match letter {
            'I' => Some(Level::Info),
            'W' => Some(Level::Warn),
            'E' | 'F' => Some(Level::Error),
            _ => None,
        }
    }

    /// The OTLP `SeverityNumber` of the level's base severity.
    pub fn severity_number(self) -> i32 {
        match self {
            Level::Error => 17,
            Level::Warn => 13,
            Level::Info => 9,
            Level::Debug => 5,
            Level::Trace => 1,
        }
    }

    /// The OTLP `SeverityText` spelling.
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_level_words_in_any_case() {
        assert_eq!(Level::parse("info"), Some(Level::Info));
        assert_eq!(Level::parse("ERROR"), Some(Level::Error));
        assert_eq!(Level::parse("Warning"), Some(Level::Warn));
        assert_eq!(Level::parse("dpanic"), Some(Level::Error));
        assert_eq!(Level::parse("verbose"), None);
        assert_eq!(Level::parse(""), None);
    }

    #[test]
    fn zap_verbosity_levels_are_trace() {
        assert_eq!(Level::parse("Level(-5)"), Some(Level::Trace));
        assert_eq!(Level::parse("LEVEL(-2)"), Some(Level::Trace));
        assert_eq!(Level::parse("Level(-x)"), None);
        assert_eq!(Level::parse("Level(-"), None);
    }

    #[test]
    fn klog_letters() {
        assert_eq!(Level::from_klog_letter('I'), Some(Level::Info));
        assert_eq!(Level::from_klog_letter('F'), Some(Level::Error));
        assert_eq!(Level::from_klog_letter('X'), None);
    }

    #[test]
    fn otlp_severity() {
        assert_eq!(Level::Error.severity_number(), 17);
        assert_eq!(Level::Trace.severity_number(), 1);
        assert_eq!(Level::Warn.name(), "WARN");
    }
}
