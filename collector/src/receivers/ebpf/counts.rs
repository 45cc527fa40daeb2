//! What the kernel probe counts per cgroup, read from its map's values: the layout
//! of `struct counts` in bpf/probe.bpf.c, one value per CPU, summed here.

/// Counter fields of `struct counts`, in its order.
const FIELDS: usize = 9;
const COMMAND_LENGTH: usize = 16;
/// Size of `struct counts`.
pub const VALUE_SIZE: usize = FIELDS * 8 + COMMAND_LENGTH;

/// One cgroup's totals since the probe first saw it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub established: u64,
    pub refused: u64,
    pub reset: u64,
    pub timed_out: u64,
    /// Ended before being established for another reason: the client closed it
    /// before an answer (its own dial timeout), the host was unreachable.
    pub failed: u64,
    pub sent_bytes: u64,
    pub send_calls: u64,
    pub forks: u64,
    pub enospc: u64,
    /// The command that first did any of it in the cgroup.
    pub command: String,
}

impl Counts {
    /// Sums the per-CPU values of one cgroup; a value of the wrong size is skipped.
    pub fn sum_per_cpu<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut counts = Counts::default();
        for value in values {
            let Some((fields, command)) = value.split_at_checked(FIELDS * 8) else {
                continue;
            };
            if command.len() != COMMAND_LENGTH {
                continue;
            }
            let mut numbers = fields
                .chunks_exact(8)
                .map(|chunk| chunk.try_into().map(u64::from_ne_bytes).unwrap_or(0));
            for field in counts.fields_mut() {
                *field += numbers.next().unwrap_or(0);
            }
            if counts.command.is_empty() {
                let end = command
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(command.len());
                counts.command =
                    String::from_utf8_lossy(command.get(..end).unwrap_or_default()).into_owned();
            }
        }
        counts
    }

    fn fields_mut(&mut self) -> [&mut u64; FIELDS] {
        [
            &mut self.established,
            &mut self.refused,
            &mut self.reset,
            &mut self.timed_out,
            &mut self.failed,
            &mut self.sent_bytes,
            &mut self.send_calls,
            &mut self.forks,
            &mut self.enospc,
        ]
    }

    /// Connection outcomes as the metric's `outcome` attribute names them.
    pub fn outcomes(&self) -> [(&'static str, u64); 5] {
        [
            ("established", self.established),
            ("refused", self.refused),
            ("reset", self.reset),
            ("timed_out", self.timed_out),
            ("failed", self.failed),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(numbers: [u64; FIELDS], command: &str) -> Vec<u8> {
        let mut bytes: Vec<u8> = numbers.iter().flat_map(|n| n.to_ne_bytes()).collect();
        let mut name = [0u8; COMMAND_LENGTH];
        name[..command.len()].copy_from_slice(command.as_bytes());
        bytes.extend(name);
        bytes
    }

    #[test]
    fn per_cpu_values_are_summed() {
        let cpu0 = value([1, 2, 3, 4, 5, 600, 7, 8, 9], "manager");
        let cpu1 = value([10, 20, 30, 40, 50, 6000, 70, 80, 90], "");
        let counts = Counts::sum_per_cpu([cpu0.as_slice(), cpu1.as_slice()]);
        assert_eq!(
            counts,
            Counts {
                established: 11,
                refused: 22,
                reset: 33,
                timed_out: 44,
                failed: 55,
                sent_bytes: 6600,
                send_calls: 77,
                forks: 88,
                enospc: 99,
                command: "manager".into(),
            }
        );
        assert_eq!(cpu0.len(), VALUE_SIZE);
    }

    #[test]
    fn values_of_another_size_are_skipped() {
        let short = vec![1u8; 10];
        assert_eq!(Counts::sum_per_cpu([short.as_slice()]), Counts::default());
    }
}
