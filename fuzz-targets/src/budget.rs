use common::MaxUnavailable;

/// `--max-unavailable` and `--max-unavailable-per-zone`: a parsed budget is written back as
/// it parses, and resolved against a pool it allows at least one node unless it is 0 or 0%
/// (which hold every new reboot) and, as a percentage, never more than the pool holds.
pub fn budget(data: &[u8]) {
    let Some(text) = crate::text(data) else {
        return;
    };
    let Ok(budget) = text.parse::<MaxUnavailable>() else {
        return;
    };
    let written = budget.to_string();
    assert_eq!(written.parse(), Ok(budget), "{text:?} written {written:?}");
    // Pool sizes a cluster has, and the edges: empty, one node, the largest Kubernetes tests.
    let sizes = [0, 1, 2, 3, 7, 10, 99, 100, 101, 5000, 65_536];
    for pool in sizes
        .into_iter()
        .chain(data.iter().map(|b| usize::from(*b)))
    {
        let allowed = budget.resolve(pool);
        let holds = matches!(
            budget,
            MaxUnavailable::Count(0) | MaxUnavailable::Percent(0)
        );
        assert_eq!(
            allowed == 0,
            holds,
            "{budget} of {pool} nodes allows {allowed}"
        );
        match budget {
            MaxUnavailable::Count(n) => assert_eq!(allowed, n as usize, "{budget} of {pool}"),
            MaxUnavailable::Percent(_) => {
                assert!(
                    allowed <= pool.max(1),
                    "{budget} of {pool} nodes allows {allowed}"
                );
            }
        }
    }
}
