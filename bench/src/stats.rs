//! Summaries of samples: nearest-rank percentiles, medians, a median with its range (how a
//! figure measured several times is reported, so that a noisy figure shows as such), and a
//! least-squares line (to extrapolate a per-node cost).

use serde::Serialize;
use std::time::Duration;

/// The `p`-th percentile (0 < p <= 100) of `samples`, nearest rank; `None` when empty.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// The median (the mean of the two middle values for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

/// A figure measured several times: the median and the range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How many values.
    pub n: usize,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Self> {
        Some(Self {
            median: median(values)?,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n: values.len(),
        })
    }

    /// `12.3 ms (11.0–14.1)`; the range is left out for a single value.
    pub fn show(&self, unit: &str, decimals: usize) -> String {
        if self.n < 2 {
            return format!("{:.decimals$}{unit}", self.median);
        }
        format!(
            "{:.decimals$}{unit} ({:.decimals$}–{:.decimals$})",
            self.median, self.min, self.max
        )
    }
}

/// Durations in milliseconds, for percentiles.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latencies {
    pub samples_ms: Vec<f64>,
}

impl Latencies {
    pub fn push(&mut self, latency: Duration) {
        self.samples_ms.push(latency.as_secs_f64() * 1000.0);
    }

    pub fn percentile(&self, p: f64) -> Option<f64> {
        percentile(&self.samples_ms, p)
    }
}

/// `y = intercept + slope * x`, fitted by least squares.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Line {
    pub intercept: f64,
    pub slope: f64,
}

impl Line {
    /// The fit through `points`; `None` with fewer than two distinct x.
    pub fn fit(points: &[(f64, f64)]) -> Option<Self> {
        let n = points.len() as f64;
        let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
        let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
        if points.len() < 2 || sxx <= 0.0 {
            return None;
        }
        let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
        let slope = sxy / sxx;
        Some(Self {
            intercept: mean_y - slope * mean_x,
            slope,
        })
    }

    pub fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), Some(100.0));
        assert_eq!(percentile(&samples, 99.0), Some(198.0));
        assert_eq!(percentile(&samples, 100.0), Some(200.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn a_spread_has_median_and_range() {
        let s = Spread::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.5, 1.0, 10.0, 4));
        assert_eq!(s.show(" ms", 1), "2.5 ms (1.0–10.0)");
        assert_eq!(Spread::of(&[4.0]).unwrap().show(" s", 0), "4 s");
        assert_eq!(Spread::of(&[]), None);
    }

    #[test]
    fn a_line_is_fitted() {
        let line = Line::fit(&[(1000.0, 22.0), (5000.0, 30.0), (20000.0, 60.0)]).unwrap();
        assert!((line.slope - 0.002).abs() < 1e-9, "{line:?}");
        assert!((line.at(65_000.0) - 150.0).abs() < 1e-6, "{line:?}");
        assert_eq!(Line::fit(&[(1.0, 2.0)]), None);
        assert_eq!(Line::fit(&[(1.0, 2.0), (1.0, 3.0)]), None);
    }
}
