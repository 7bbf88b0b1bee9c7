use common::marks::parse_label;
use controller::cache::pool::PoolSelector;
use kube::core::Expression;
use std::collections::BTreeMap;

/// `--node-selector`, `--agent-selector` and `--drain-pod-selector`: a selector that parses
/// names only label keys and values Kubernetes accepts (one the API server would refuse
/// must be refused here too, not read as a pool that silently selects nothing), its
/// requirements written out parse back to the same selector, and matching never panics.
pub fn selector(data: &[u8]) {
    let Some(text) = crate::text(data) else {
        return;
    };
    let Ok(pool) = PoolSelector::parse(text) else {
        return;
    };
    for expression in pool.expressions().clone() {
        let (key, values) = parts(&expression);
        for value in values
            .iter()
            .copied()
            .chain(values.is_empty().then_some(""))
        {
            let label = format!("{key}={value}");
            assert!(
                parse_label(&label).is_ok(),
                "{text:?} was accepted with the label {label:?}, which Kubernetes refuses"
            );
        }
    }
    let written = pool.expressions().to_string();
    let again = PoolSelector::parse(&written)
        .unwrap_or_else(|e| panic!("{text:?} written {written:?} no longer parses: {e}"));
    assert_eq!(
        again.expressions(),
        pool.expressions(),
        "{text:?} written {written:?}"
    );
    // Labels made of the selector's own keys and values, so that matching has work to do.
    let labels: BTreeMap<String, String> = pool
        .expressions()
        .clone()
        .into_iter()
        .map(|e| {
            let (key, values) = parts(&e);
            (
                key.to_owned(),
                values.first().copied().unwrap_or("").to_owned(),
            )
        })
        .collect();
    pool.matches(&labels);
    pool.matches(&BTreeMap::new());
}

/// An expression's key and the values it names.
fn parts(expression: &Expression) -> (&str, Vec<&str>) {
    match expression {
        Expression::In(k, set) | Expression::NotIn(k, set) => {
            (k, set.iter().map(String::as_str).collect())
        }
        Expression::Equal(k, v) | Expression::NotEqual(k, v) => (k, vec![v.as_str()]),
        Expression::Exists(k) | Expression::DoesNotExist(k) => (k, vec![]),
    }
}
