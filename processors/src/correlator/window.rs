//! A fixed ring of time buckets over a sliding window of event time: which bucket a
//! time falls in and what is still held; its users say what one bucket counts.

use std::time::Duration;

use super::events::Nanos;

/// What one bucket holds: counts, or a running sum.
pub(crate) trait Bucket: Default + Clone {
    /// Adds another bucket's content to this one.
    fn absorb(&mut self, other: &Self);
}

/// The event time of a duration, saturating far in the future.
pub(crate) fn nanos(duration: Duration) -> Nanos {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[derive(Debug, Clone)]
pub(crate) struct BucketRing<B> {
    /// Event time covered by one bucket, at least 1 ns.
    width: Nanos,
    /// Buckets in the ring, at least 1.
    count: usize,
    /// Empty until the first time is counted: many objects never see what a ring
    /// counts (a 409, a fast requeue), and their rings take no room.
    buckets: Box<[B]>,
    /// Number (time / width) of the newest bucket written, if any.
    newest: Option<u64>,
}

impl<B: Bucket> BucketRing<B> {
    /// A ring of `count` buckets spanning `window`.
    pub(crate) fn new(window: Duration, count: usize) -> Self {
        let count = count.max(1);
        let width = (nanos(window) / count as u64).max(1);
        Self {
            width,
            count,
            buckets: Box::default(),
            newest: None,
        }
    }

    /// Event time covered by one bucket.
    pub(crate) fn width(&self) -> Nanos {
        self.width
    }

    /// The bucket for `time`, or `None` when `time` is older than the ring holds.
    pub(crate) fn bucket_mut(&mut self, time: Nanos) -> Option<&mut B> {
        if self.buckets.is_empty() {
            self.buckets = vec![B::default(); self.count].into_boxed_slice();
        }
        let number = time / self.width;
        match self.newest {
            None => self.newest = Some(number),
            Some(newest) if number > newest => self.move_to(newest, number),
            Some(newest) if number + self.len() <= newest => return None,
            Some(_) => {}
        }
        let position = self.position(number);
        self.buckets.get_mut(position)
    }

    /// The held buckets of the window ending at `now`, oldest first, each with its
    /// place in the window (0 is the oldest).
    pub(crate) fn window(&self, now: Nanos) -> impl Iterator<Item = (usize, &B)> {
        let len = self.len();
        let last = now / self.width;
        // Bucket numbers both in the window ending at `last` and still held by the
        // ring (the `len` ending at the newest); empty when there is none.
        let (oldest, held) = match self.newest {
            Some(newest) => {
                let oldest_in_window = (last + 1).saturating_sub(len);
                let oldest = oldest_in_window.max((newest + 1).saturating_sub(len));
                (oldest, (last.min(newest) + 1).saturating_sub(oldest))
            }
            None => (0, 0),
        };
        // From the oldest bucket's position on, wrapping around once: no division
        // per bucket.
        let (before, from) = self
            .buckets
            .split_at_checked(self.position(oldest))
            .unwrap_or_default();
        let first_place =
            usize::try_from((oldest + len).saturating_sub(last + 1)).unwrap_or_default();
        from.iter()
            .chain(before)
            .take(usize::try_from(held).unwrap_or_default())
            .enumerate()
            .map(move |(at, bucket)| (first_place + at, bucket))
    }

    /// Everything counted in the window ending at `now`.
    pub(crate) fn total(&self, now: Nanos) -> B {
        self.sum(self.window(now).map(|(_, bucket)| bucket))
    }

    /// Number of buckets.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Bytes the buckets take.
    #[cfg(test)]
    pub(crate) fn footprint(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<B>()
    }

    fn sum<'a>(&self, buckets: impl Iterator<Item = &'a B>) -> B
    where
        B: 'a,
    {
        buckets.fold(B::default(), |mut total, bucket| {
            total.absorb(bucket);
            total
        })
    }

    /// Makes `number` the newest bucket, emptying the buckets it skips over.
    fn move_to(&mut self, newest: u64, number: u64) {
        let stale = usize::try_from((number - newest).min(self.len())).unwrap_or_default();
        let start = self.position(newest + 1);
        self.newest = Some(number);
        let Some((before, from)) = self.buckets.split_at_mut_checked(start) else {
            // Not reached: a position is within the ring. Were it, the ring starts over.
            self.buckets.fill(B::default());
            return;
        };
        let wrapped = stale.saturating_sub(from.len());
        for bucket in from
            .iter_mut()
            .take(stale)
            .chain(before.iter_mut().take(wrapped))
        {
            *bucket = B::default();
        }
    }

    fn len(&self) -> u64 {
        self.count as u64
    }

    fn position(&self, number: u64) -> usize {
        usize::try_from(number % self.len()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlator::events::NANOS_PER_SECOND;

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
    fn the_window_has_the_buckets_both_in_it_and_held() {
        for newest in 0..25 {
            for last in 0..25 {
                let mut ring = ring();
                add(&mut ring, newest);
                let places: Vec<usize> = ring.window(at(last)).map(|(place, _)| place).collect();
                // Every place of the window, kept when its bucket is held.
                let expected: Vec<usize> = (0..10u64)
                    .filter(|place| {
                        (last + 1 + place)
                            .checked_sub(10)
                            .is_some_and(|number| number <= newest && number + 10 > newest)
                    })
                    .map(|place| place as usize)
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
        assert_eq!(ring.window(at(117)).count(), 10);
    }

    #[test]
    fn moving_far_ahead_forgets_everything() {
        let mut ring = ring();
        add(&mut ring, 100);
        add(&mut ring, 200);
        assert_eq!(ring.total(at(200)), Count(1));
        assert_eq!(ring.window(at(200)).count(), 10);
    }
}
