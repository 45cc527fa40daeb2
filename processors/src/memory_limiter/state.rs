//! Where memory use stands against the limits: normal, above the soft limit (new
//! data refused) or above the hard limit (queued data dropped too), with hysteresis
//! so that use hovering at a limit does not flip the state on every sample.

/// The two limits, in bytes: refuse new data above `soft`, drop queued data above `hard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub soft: u64,
    pub hard: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MemoryState {
    Normal = 0,
    Soft = 1,
    Hard = 2,
}

impl MemoryState {
    /// The value of the `opscope_memory_limiter_state` gauge.
    pub fn gauge_value(self) -> i64 {
        self as i64
    }

    pub fn from_gauge_value(value: u8) -> Self {
        match value {
            0 => Self::Normal,
            1 => Self::Soft,
            _ => Self::Hard,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Soft => "soft",
            Self::Hard => "hard",
        }
    }
}

impl Limits {
    /// How far below a limit use must fall before the state it entered is left: a
    /// quarter of the spike allowance, so that leaving is quick once memory is freed.
    pub fn release_margin(&self) -> u64 {
        (self.hard - self.soft) / 4
    }

    /// The state after observing `usage` bytes in `current`.
    pub fn next_state(&self, current: MemoryState, usage: u64) -> MemoryState {
        // A state entered is kept until use falls a margin below its limit.
        let margin = self.release_margin();
        let holds = |limit: u64, entered: bool| {
            usage >= limit || (entered && usage >= limit.saturating_sub(margin))
        };
        if holds(self.hard, current == MemoryState::Hard) {
            MemoryState::Hard
        } else if holds(self.soft, current != MemoryState::Normal) {
            MemoryState::Soft
        } else {
            MemoryState::Normal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MemoryState::*;

    const LIMITS: Limits = Limits {
        soft: 800,
        hard: 1000,
    };

    #[test]
    fn rises_through_soft_to_hard_and_back_with_hysteresis() {
        assert_eq!(LIMITS.release_margin(), 50);
        let mut state = Normal;
        let mut steps = Vec::new();
        for usage in [100, 799, 800, 999, 1000, 960, 949, 900, 760, 749, 100] {
            state = LIMITS.next_state(state, usage);
            steps.push(state);
        }
        assert_eq!(
            steps,
            [
                Normal, Normal, Soft, Soft, Hard, Hard, Soft, Soft, Soft, Normal, Normal
            ]
        );
    }

    #[test]
    fn a_sudden_drop_goes_straight_back_to_normal() {
        assert_eq!(LIMITS.next_state(Hard, 10), Normal);
        assert_eq!(LIMITS.next_state(Normal, 5000), Hard);
    }

    #[test]
    fn without_a_spike_allowance_there_is_no_margin() {
        let limits = Limits {
            soft: 100,
            hard: 100,
        };
        assert_eq!(limits.next_state(Hard, 99), Normal);
        assert_eq!(limits.next_state(Normal, 100), Hard);
    }
}
