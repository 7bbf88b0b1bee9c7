//! The pool: the nodes `--node-selector` selects. The node watch covers every Node, so that a
//! node holding one of this pool's slots is still seen, and finished, after its labels take
//! it out of the pool; membership is the selector evaluated here on each node's labels.

use common::marks::{selector_key, selector_value};
use kube::core::{Expression, Selector, SelectorExt};
use std::collections::{BTreeMap, BTreeSet};

/// A parsed `--node-selector` (Kubernetes label selector syntax); empty selects every node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolSelector {
    text: Option<String>,
    selector: Selector,
    keys: BTreeSet<String>,
    /// Selectors whose nodes are not this pool's at all (the flags' pool takes only the nodes
    /// no `RebootPool` selects; a deleted pool selects none).
    excluded: Vec<Selector>,
    /// The selectors of the other `RebootPool`s: a node one of them selects too is granted by
    /// neither, yet counts against the budget of each while it is unavailable (a second
    /// control-plane node must not go down because the first is also labelled into a zone's
    /// pool).
    shared: Vec<Selector>,
}

impl PoolSelector {
    /// Parses `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` and `!k`, separated
    /// by commas.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut expressions = Vec::new();
        for requirement in split_requirements(text)? {
            expressions.push(parse_requirement(&requirement)?);
        }
        let keys = expressions.iter().map(|e| key_of(e).to_owned()).collect();
        Ok(Self {
            text: (!text.trim().is_empty()).then(|| text.trim().to_owned()),
            selector: expressions.into_iter().collect(),
            keys,
            excluded: Vec::new(),
            shared: Vec::new(),
        })
    }

    /// A selector already read and checked (a `RebootPool`'s `nodeSelector`).
    pub fn of(selector: Selector) -> Self {
        let keys = selector
            .clone()
            .into_iter()
            .map(|e| key_of(&e).to_owned())
            .collect();
        let text = selector.to_string();
        Self {
            text: (!text.is_empty()).then_some(text),
            selector,
            keys,
            excluded: Vec::new(),
            shared: Vec::new(),
        }
    }

    /// This pool without the nodes that any of `others` selects: they are neither granted
    /// nor counted here.
    #[must_use]
    pub fn excluding<'a>(mut self, others: impl IntoIterator<Item = &'a PoolSelector>) -> Self {
        for other in others {
            self.keys.extend(other.keys.iter().cloned());
            self.excluded.push(other.selector.clone());
        }
        self
    }

    /// This pool beside `peers`: a node one of them selects too is granted by neither, and
    /// counted by both.
    #[must_use]
    pub fn sharing<'a>(mut self, peers: impl IntoIterator<Item = &'a PoolSelector>) -> Self {
        for peer in peers {
            self.keys.extend(peer.keys.iter().cloned());
            self.shared.push(peer.selector.clone());
        }
        self
    }

    /// Whether the node is this pool's: it may be granted here.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.counts(labels) && !self.shared_with_a_peer(labels)
    }

    /// Whether the node counts against this pool's budgets: it is the pool's, or one that a
    /// peer selects too.
    pub fn counts(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selects(labels) && !self.excluded.iter().any(|other| other.matches(labels))
    }

    /// Whether the node counts here but is granted by no pool: a peer selects it too.
    pub fn shared_with_a_peer(&self, labels: &BTreeMap<String, String>) -> bool {
        self.shared.iter().any(|peer| peer.matches(labels))
    }

    /// Whether the selector itself selects the node, other pools aside.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.matches(labels)
    }

    /// The label keys the selector (and the other pools' it excludes) reads: the only labels
    /// the node cache keeps.
    pub fn keys(&self) -> &BTreeSet<String> {
        &self.keys
    }

    /// The requirements as parsed (the fuzz target writes them out and parses them again).
    pub fn expressions(&self) -> &Selector {
        &self.selector
    }

    /// The selector as given, for logs and for the API server's own check.
    pub fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }
}

fn key_of(expression: &Expression) -> &str {
    match expression {
        Expression::In(k, _)
        | Expression::NotIn(k, _)
        | Expression::Equal(k, _)
        | Expression::NotEqual(k, _)
        | Expression::Exists(k)
        | Expression::DoesNotExist(k) => k,
    }
}

/// Splits at the commas that are not inside a value set's parentheses.
fn split_requirements(text: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut current) = (0usize, String::new());
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("a ')' without its '('")?,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if depth != 0 {
        return Err("a '(' without its ')'".into());
    }
    parts.push(current);
    let parts: Vec<String> = parts.into_iter().map(|p| p.trim().to_owned()).collect();
    if parts.len() == 1 && parts[0].is_empty() {
        return Ok(Vec::new());
    }
    match parts.iter().any(String::is_empty) {
        true => Err("an empty requirement between commas".into()),
        false => Ok(parts),
    }
}

/// A key and values are checked as Kubernetes checks labels: one it would refuse can match no
/// node, so a selector naming it would select nothing without a word (and the API server
/// refuses it where the selector reaches it: `--agent-selector`, `--drain-pod-selector`).
fn parse_requirement(text: &str) -> Result<Expression, String> {
    let key = |k: &str| selector_key(k.trim()).map(str::to_owned);
    let value = |v: &str| selector_value(v.trim()).map(str::to_owned);
    if let Some(rest) = text.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(key(rest)?));
    }
    for (operator, negated) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = text.split_once(operator) {
            let (k, v) = (key(k)?, value(v)?);
            return Ok(if negated {
                Expression::NotEqual(k, v)
            } else {
                Expression::Equal(k, v)
            });
        }
    }
    let words: Vec<&str> = text.splitn(2, char::is_whitespace).collect();
    if let [k, rest] = words.as_slice() {
        let rest = rest.trim();
        let (negated, set) = match rest.strip_prefix("notin") {
            Some(set) => (true, set),
            None => (
                false,
                rest.strip_prefix("in")
                    .ok_or(format!("{text:?}: expected `in` or `notin`"))?,
            ),
        };
        let set = set.trim();
        let values = set
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or(format!(
                "{text:?}: the values go in parentheses, like `zone in (a,b)`"
            ))?;
        let values: BTreeSet<String> = values.split(',').map(value).collect::<Result<_, _>>()?;
        let k = key(k)?;
        return Ok(if negated {
            Expression::NotIn(k, values)
        } else {
            Expression::In(k, values)
        });
    }
    Ok(Expression::Exists(key(text)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selects_like_the_api_server() {
        let pool = PoolSelector::parse("pool=a, zone in (z1,z2), !spot, tier != db, gpu").unwrap();
        let node = labels(&[("pool", "a"), ("zone", "z2"), ("tier", "web"), ("gpu", "")]);
        assert!(pool.matches(&node));
        assert!(!pool.matches(&labels(&[("pool", "a"), ("zone", "z3"), ("gpu", "")])));
        assert!(!pool.matches(&labels(&[("pool", "b"), ("zone", "z1"), ("gpu", "")])));
        let keys: Vec<&str> = pool.keys().iter().map(String::as_str).collect();
        assert_eq!(keys, ["gpu", "pool", "spot", "tier", "zone"]);
        assert!(PoolSelector::parse("").unwrap().matches(&labels(&[])));
        assert!(
            PoolSelector::parse("zone notin (z1)")
                .unwrap()
                .matches(&labels(&[]))
        );
    }

    #[test]
    fn malformed_selectors_are_refused_with_the_reason() {
        for bad in [
            "pool=a,,x",
            "zone in z1",
            "zone in (z1",
            "a b c",
            "=x",
            "zone between (a)",
        ] {
            assert!(PoolSelector::parse(bad).is_err(), "{bad}");
        }
    }

    /// Found by fuzzing: keys and values that Kubernetes refuses were taken, and selected
    /// nothing (no node can carry them) instead of being refused with the reason.
    #[test]
    fn keys_and_values_kubernetes_refuses_are_refused_with_the_reason() {
        for (bad, why) in [
            ("-x=y", "\"-x\" is not a label key"),
            ("pool=a b", "\"a b\" is not a label value"),
            ("zone in (z1, z 2)", "\"z 2\" is not a label value"),
            ("Example.com/pool=a", "lowercase DNS subdomain"),
            ("pool!=a=b", "\"a=b\" is not a label value"),
        ] {
            let error = PoolSelector::parse(bad).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
        assert!(PoolSelector::parse("example.com/pool=a, zone in (z1,), tier=").is_ok());
    }

    #[test]
    fn a_node_another_pool_selects_is_not_in_this_one() {
        let gpu = PoolSelector::parse("pool=gpu").unwrap();
        let spot = PoolSelector::parse("spot").unwrap();
        let gpu_alone = gpu.clone().excluding([&spot]);
        assert!(gpu_alone.matches(&labels(&[("pool", "gpu")])));
        assert!(!gpu_alone.matches(&labels(&[("pool", "gpu"), ("spot", "")])));
        assert!(gpu_alone.selects(&labels(&[("pool", "gpu"), ("spot", "")])));
        let keys: Vec<&str> = gpu_alone.keys().iter().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["pool", "spot"],
            "the excluded pools' keys are kept too"
        );
        let rest = PoolSelector::parse("").unwrap().excluding([&gpu, &spot]);
        assert!(rest.matches(&labels(&[("pool", "web")])));
        assert!(!rest.matches(&labels(&[("pool", "gpu")])));
        assert!(
            !rest.counts(&labels(&[("pool", "gpu")])),
            "an excluded node is not counted either"
        );
    }

    #[test]
    fn a_node_a_peer_selects_too_counts_here_but_is_not_granted_here() {
        let cp = PoolSelector::parse("role=cp").unwrap();
        let zone_a = PoolSelector::parse("zone=a").unwrap();
        let shared = cp.clone().sharing([&zone_a]);
        let both = labels(&[("role", "cp"), ("zone", "a")]);
        assert!(!shared.matches(&both), "granted by neither");
        assert!(shared.counts(&both), "counted by both");
        assert!(shared.shared_with_a_peer(&both));
        let alone = labels(&[("role", "cp")]);
        assert!(shared.matches(&alone) && shared.counts(&alone));
        assert!(!shared.shared_with_a_peer(&alone));
        assert!(
            !shared.counts(&labels(&[("zone", "a")])),
            "the peer's own node"
        );
        let keys: Vec<&str> = shared.keys().iter().map(String::as_str).collect();
        assert_eq!(keys, ["role", "zone"], "the peers' keys are kept too");
    }
}
