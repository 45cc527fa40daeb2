//! Which gateway owns a key: rendezvous (highest random weight) hashing over the
//! resolved gateways. Each gateway scores every key and the highest score owns it,
//! so a gateway that comes or goes moves only the keys it wins or held (about 1/N of
//! them), with no virtual nodes to tune. A few gateways are scored per key: the cost
//! is a multiply and a few shifts each.

use opscope_model::hash::fnv1a;

/// The gateways, in the order the resolver gave them, each with its hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ring {
    members: Vec<Member>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Member {
    endpoint: String,
    seed: u64,
}

impl Ring {
    /// A ring of `endpoints` (duplicates counted once), sorted so that two agents
    /// that resolved the same set in another order agree.
    pub fn new<S: AsRef<str>>(endpoints: &[S]) -> Self {
        let mut endpoints: Vec<&str> = endpoints.iter().map(AsRef::as_ref).collect();
        endpoints.sort_unstable();
        endpoints.dedup();
        let members = endpoints
            .into_iter()
            .map(|endpoint| Member {
                endpoint: endpoint.to_string(),
                seed: fnv1a(endpoint.as_bytes()),
            })
            .collect();
        Self { members }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The endpoints, sorted.
    pub fn endpoints(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|member| member.endpoint.as_str())
    }

    /// The index (in [`Ring::endpoints`]) of the gateway that owns the key whose
    /// hash is `key`; `None` for an empty ring.
    pub fn owner(&self, key: u64) -> Option<usize> {
        self.members
            .iter()
            .enumerate()
            .max_by_key(|(_, member)| (mix(member.seed ^ key), member.seed))
            .map(|(index, _)| index)
    }

    /// The endpoint that owns the key whose hash is `key`.
    pub fn owner_endpoint(&self, key: u64) -> Option<&str> {
        let index = self.owner(key)?;
        self.members
            .get(index)
            .map(|member| member.endpoint.as_str())
    }
}

/// The key hash of a routing key: the bytes of its parts, each followed by a zero
/// byte so that `("ab", "c")` and `("a", "bc")` differ.
pub fn key_hash<'a>(parts: impl IntoIterator<Item = &'a str>) -> u64 {
    let mut bytes = Vec::with_capacity(64);
    for part in parts {
        bytes.extend_from_slice(part.as_bytes());
        bytes.push(0);
    }
    fnv1a(&bytes)
}

/// A bijective 64-bit finaliser (SplitMix64's): FNV-1a alone spreads similar keys
/// poorly across the high bits the comparison reads.
fn mix(mut value: u64) -> u64 {
    value ^= value >> 30;
    value = value.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    value ^= value >> 27;
    value = value.wrapping_mul(0x94d0_49bb_1331_11eb);
    value ^ (value >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateways(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{}:4317", i + 5)).collect()
    }

    fn keys(n: usize) -> impl Iterator<Item = u64> {
        (0..n).map(|i| key_hash(["shop", "widgets", &format!("w-{i}")]))
    }

    #[test]
    fn keys_spread_within_ten_percent_of_an_even_share() {
        for n in [2, 3, 5, 8] {
            let ring = Ring::new(&gateways(n));
            let mut owned = vec![0usize; n];
            for key in keys(100_000) {
                owned[ring.owner(key).expect("an owner")] += 1;
            }
            let even = 100_000 / n;
            for count in &owned {
                let off = (*count as f64 - even as f64).abs() / even as f64;
                assert!(off < 0.10, "{n} gateways: {owned:?}");
            }
        }
    }

    #[test]
    fn a_gateway_that_comes_or_goes_moves_about_one_nth_of_the_keys() {
        let three = Ring::new(&gateways(3));
        let four = Ring::new(&gateways(4));
        let (mut moved, total) = (0usize, 100_000usize);
        for key in keys(total) {
            let before = three.owner_endpoint(key);
            let after = four.owner_endpoint(key);
            if before != after {
                moved += 1;
                // Only keys the new gateway wins move.
                assert_eq!(after, Some("10.0.0.8:4317"));
            }
        }
        let share = moved as f64 / total as f64;
        assert!((0.22..0.28).contains(&share), "{share}");
    }

    #[test]
    fn the_order_of_resolution_does_not_matter() {
        let mut reversed = gateways(5);
        reversed.reverse();
        reversed.push("10.0.0.5:4317".into());
        let ring = Ring::new(&gateways(5));
        assert_eq!(Ring::new(&reversed), ring);
        for key in keys(1_000) {
            assert_eq!(
                Ring::new(&reversed).owner_endpoint(key),
                ring.owner_endpoint(key)
            );
        }
    }

    #[test]
    fn an_empty_ring_owns_nothing() {
        assert_eq!(Ring::new::<String>(&[]).owner(7), None);
        assert_ne!(key_hash(["ab", "c"]), key_hash(["a", "bc"]));
    }
}
