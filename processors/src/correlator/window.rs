//! A ring of time buckets over a sliding window of event time: which bucket a time
//! falls in and what is still held; its users say what one bucket counts.

use std::time::Duration;

use opscope_model::timestamp::Nanos;

/// What one bucket holds: counts, or a running sum.
pub(crate) trait Bucket: Default + Clone {
    /// Adds another bucket's content to this one.
    fn absorb(&mut self, other: &Self);
}

/// The event time of a duration, saturating far in the future.
pub(crate) fn nanos(duration: Duration) -> Nanos {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Buckets are kept only once written: every tracked object has a ring per detector,
/// and an object reconciled every few seconds writes a fifth of a minute's buckets
/// (16 bytes each for the loop detector's, rather than 600 for all 60), one never
/// seen by a detector none.
#[derive(Debug, Clone)]
pub(crate) struct BucketRing<B> {
    /// Event time covered by one bucket, at least 1 ns.
    width: Nanos,
    /// Buckets in the ring, at least 1 and below 2^31.
    count: usize,
    /// The written buckets still held, oldest first, each with the low 32 bits of its
    /// number (time / width): all are within `count` of the newest, so those bits
    /// tell them apart.
    written: Vec<(u32, B)>,
    /// Number of the newest bucket written, if any.
    newest: Option<u64>,
}

/// The largest ring: numbers are told apart by their low 32 bits.
const MAX_BUCKETS: usize = 1 << 31;

impl<B: Bucket> BucketRing<B> {
    /// A ring of `count` buckets spanning `window`.
    pub(crate) fn new(window: Duration, count: usize) -> Self {
        let count = count.clamp(1, MAX_BUCKETS - 1);
        let width = (nanos(window) / count as u64).max(1);
        Self {
            width,
            count,
            written: Vec::new(),
            newest: None,
        }
    }

    /// Event time covered by one bucket.
    pub(crate) fn width(&self) -> Nanos {
        self.width
    }

    /// The bucket for `time`, or `None` when `time` is older than the ring holds.
    pub(crate) fn bucket_mut(&mut self, time: Nanos) -> Option<&mut B> {
        let number = time / self.width;
        let newest = match self.newest {
            Some(newest) if number > newest => self.move_to(newest, number),
            Some(newest) if number.saturating_add(self.len()) <= newest => return None,
            Some(newest) => newest,
            None => {
                self.newest = Some(number);
                number
            }
        };
        // From the newest back (most times fall in the newest bucket): the last
        // bucket at least as old as this one is it, or this one goes after it.
        let age = newest - number;
        let key = low_bits(number);
        let at = match self
            .written
            .iter()
            .rposition(|(written, _)| age_of(newest, *written) >= age)
        {
            Some(at)
                if self
                    .written
                    .get(at)
                    .is_some_and(|(written, _)| *written == key) =>
            {
                at
            }
            older => {
                let at = older.map_or(0, |older| older + 1);
                self.written.insert(at, (key, B::default()));
                at
            }
        };
        self.written.get_mut(at).map(|(_, bucket)| bucket)
    }

    /// The written buckets of the window ending at `now`, oldest first, each with its
    /// place in the window (0 is the oldest place, `count() - 1` the newest).
    pub(crate) fn window(&self, now: Nanos) -> impl Iterator<Item = (usize, &B)> {
        let last = now / self.width;
        let len = self.len();
        let newest = self.newest.unwrap_or_default();
        self.written.iter().filter_map(move |(key, bucket)| {
            let number = newest - age_of(newest, *key);
            let end = number.saturating_add(len);
            if number > last || end <= last {
                return None;
            }
            Some((usize::try_from(end - last - 1).ok()?, bucket))
        })
    }

    /// Everything counted in the window ending at `now`.
    pub(crate) fn total(&self, now: Nanos) -> B {
        self.window(now)
            .fold(B::default(), |mut total, (_, bucket)| {
                total.absorb(bucket);
                total
            })
    }

    /// Number of buckets.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Bytes the buckets take.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.written.capacity() * std::mem::size_of::<(u32, B)>()
    }

    /// Makes `number` the newest bucket, forgetting those it leaves behind.
    fn move_to(&mut self, newest: u64, number: u64) -> u64 {
        let len = self.len();
        self.written
            .retain(|(key, _)| (newest - age_of(newest, *key)).saturating_add(len) > number);
        self.newest = Some(number);
        number
    }

    fn len(&self) -> u64 {
        self.count as u64
    }
}

/// How many buckets before `newest` the bucket of `key` is.
fn age_of(newest: u64, key: u32) -> u64 {
    u64::from(low_bits(newest).wrapping_sub(key))
}

fn low_bits(number: u64) -> u32 {
    // Truncation meant: see `BucketRing::written`.
    number as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use opscope_model::timestamp::NANOS_PER_SECOND;

    #[derive(Debug, Clone, Default, PartialEq)]
    struct Count(u32);

    impl Bucket for Count {
        fn absorb(&mut self, other: &Self) {
            self.0 += other.0;
        }
    }

    fn at(seconds: u64) -> Nanos {
        seconds * NANOS_PER_SECOND
    }

    fn ring() -> BucketRing<Count> {
        BucketRing::new(Duration::from_secs(10), 10)
    }

    fn add(ring: &mut BucketRing<Count>, seconds: u64) -> bool {
        ring.bucket_mut(at(seconds))
            .map(|bucket| bucket.0 += 1)
            .is_some()
    }

    #[test]
    fn counts_what_falls_in_the_window() {
        let mut ring = ring();
        for second in [100, 101, 101, 105, 109] {
            add(&mut ring, second);
        }
        assert_eq!(ring.total(at(109)), Count(5));
        assert_eq!(ring.total(at(110)), Count(4), "second 100 left the window");
        assert_eq!(ring.total(at(120)), Count(0));
    }

    #[test]
    fn late_times_land_in_their_bucket_until_it_is_reused() {
        let mut ring = ring();
        add(&mut ring, 100);
        assert!(add(&mut ring, 95), "within the ring");
        assert!(!add(&mut ring, 90), "older than the ring holds");
        assert_eq!(ring.total(at(100)), Count(2));
    }

    #[test]
    fn the_window_has_the_written_buckets_both_in_it_and_held() {
        for newest in 0..25 {
            for last in 0..25 {
                let mut ring = ring();
                add(&mut ring, newest);
                let places: Vec<usize> = ring.window(at(last)).map(|(place, _)| place).collect();
                // The one written bucket, at its place, when the window ending at
                // `last` holds it.
                let expected: Vec<usize> = (newest <= last && newest + 10 > last)
                    .then(|| (newest + 10 - last - 1) as usize)
                    .into_iter()
                    .collect();
                assert_eq!(places, expected, "newest {newest}, now {last}");
            }
            assert_eq!(
                BucketRing::<Count>::new(Duration::from_secs(10), 10)
                    .window(at(newest))
                    .count(),
                0
            );
        }
    }

    #[test]
    fn moving_ahead_empties_the_buckets_it_reuses() {
        let mut ring = ring();
        for second in 105..=114 {
            add(&mut ring, second);
        }
        add(&mut ring, 117);
        // 115 and 116 are empty, 117 holds one; 108 to 114 are still held.
        assert_eq!(ring.total(at(117)), Count(8));
        let places: Vec<usize> = ring.window(at(117)).map(|(place, _)| place).collect();
        assert_eq!(places, [0, 1, 2, 3, 4, 5, 6, 9]);
    }

    #[test]
    fn moving_far_ahead_forgets_everything() {
        let mut ring = ring();
        add(&mut ring, 100);
        add(&mut ring, 200);
        assert_eq!(ring.total(at(200)), Count(1));
        assert_eq!(ring.window(at(200)).count(), 1);
        assert_eq!(ring.written.len(), 1, "nothing older is kept");
    }

    /// Every second of the last ten, counted plainly: what the ring must agree with.
    fn counted_plainly(adds: &[u64], now: u64) -> u32 {
        let mut newest: Option<u64> = None;
        let mut kept: Vec<u64> = Vec::new();
        for &second in adds {
            match newest {
                Some(n) if second + 10 <= n => continue,
                Some(n) if second <= n => {}
                _ => newest = Some(second),
            }
            kept.push(second);
        }
        let newest = newest.unwrap_or_default();
        kept.iter()
            .filter(|&&s| s + 10 > newest && s <= now && s + 10 > now)
            .count() as u32
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_counting_plainly(
            adds in proptest::collection::vec(0u64..60, 0..40),
            now in 0u64..70,
        ) {
            let mut ring = ring();
            for &second in &adds {
                add(&mut ring, second);
            }
            proptest::prop_assert_eq!(ring.total(at(now)).0, counted_plainly(&adds, now));
            proptest::prop_assert!(ring.written.len() <= 10);
            let places: Vec<usize> = ring.window(at(now)).map(|(place, _)| place).collect();
            proptest::prop_assert!(places.windows(2).all(|pair| pair[0] < pair[1]));
            proptest::prop_assert!(places.iter().all(|&place| place < 10));
        }
    }

    #[test]
    fn bucket_numbers_far_apart_in_time_do_not_collide() {
        let mut ring = ring();
        let far = 1u64 << 32;
        add(&mut ring, 5);
        add(&mut ring, 5 + far);
        assert_eq!(ring.total(at(5 + far)), Count(1));
        assert_eq!(ring.total(at(5)), Count(0));
    }
}
