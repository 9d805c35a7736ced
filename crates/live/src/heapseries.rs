//! The heap probe's history of each allocation site, kept by the collector: its
//! bytes in use at every sample (a bounded ring), when its peak was first seen, and
//! its growth rate. The runtime only knows the counts now; time lives here.

use std::collections::VecDeque;

use serde_json::Value;

/// Points kept per site: at one sample every [`SAMPLE_MS`], the last minute.
pub(crate) const POINTS: usize = 240;
/// How often the collector samples every site's bytes in use (ms).
pub(crate) const SAMPLE_MS: u64 = 250;
/// `growth_bps` is the least-squares slope of the series over this last stretch
/// (ms): robust to one odd sample, unlike (last - first) / dt.
pub(crate) const GROWTH_MS: u64 = 10_000;

/// One site's history; times are ms since the probe was inserted.
#[derive(Default, Debug)]
pub(crate) struct History {
    /// `(ms, bytes in use)`, oldest first, at most [`POINTS`].
    points: VecDeque<(u64, u64)>,
    /// The highest peak seen and the time of the read that first saw it.
    peak: Option<(u64, u64)>,
}

impl History {
    /// A read at `ms` found the site's peak at `peak` bytes.
    pub(crate) fn saw_peak(&mut self, ms: u64, peak: u64) {
        if self.peak.is_none_or(|(p, _)| peak > p) {
            self.peak = Some((peak, ms));
        }
    }

    /// When the current peak was first seen (the peak itself happened between that
    /// read and the one before).
    pub(crate) fn peak_ms(&self) -> u64 {
        self.peak.map_or(0, |(_, ms)| ms)
    }

    /// Whether no sample saw the site yet.
    pub(crate) fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The sample at `ms` found `bytes` in use.
    pub(crate) fn push(&mut self, ms: u64, bytes: u64) {
        self.points.push_back((ms, bytes));
        if self.points.len() > POINTS {
            self.points.pop_front();
        }
    }

    /// Bytes per second over the last [`GROWTH_MS`] of the series: the slope of
    /// the least-squares line through its points, rounded; 0 below two points.
    pub(crate) fn growth_bps(&self) -> i64 {
        let Some(&(last, _)) = self.points.back() else { return 0 };
        let from = last.saturating_sub(GROWTH_MS);
        let recent: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter(|&&(ms, _)| ms >= from)
            .map(|&(ms, b)| (ms as f64, b as f64))
            .collect();
        let n = recent.len() as f64;
        let (mt, mb) = recent.iter().fold((0.0, 0.0), |(t, b), p| (t + p.0 / n, b + p.1 / n));
        let (cov, var) = recent
            .iter()
            .fold((0.0, 0.0), |(c, v), &(t, b)| (c + (t - mt) * (b - mb), v + (t - mt) * (t - mt)));
        if var == 0.0 {
            return 0;
        }
        (cov / var * 1000.0).round() as i64
    }

    /// The series as JSON: `[[ms, bytes], ...]`.
    pub(crate) fn series(&self) -> Value {
        self.points.iter().map(|&(ms, b)| Value::from(vec![ms, b])).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(points: &[(u64, u64)]) -> History {
        let mut h = History::default();
        for &(ms, b) in points {
            h.push(ms, b);
        }
        h
    }

    #[test]
    fn growth_is_the_least_squares_slope_of_the_last_ten_seconds() {
        assert_eq!(of(&[]).growth_bps(), 0);
        assert_eq!(of(&[(0, 500)]).growth_bps(), 0);
        // 1000 bytes more every 250 ms: 4000 B/s
        let steady: Vec<(u64, u64)> = (0..20).map(|i| (i * 250, i * 1000)).collect();
        assert_eq!(of(&steady).growth_bps(), 4000);
        // flat, and shrinking
        assert_eq!(of(&[(0, 64), (250, 64), (500, 64)]).growth_bps(), 0);
        assert_eq!(of(&[(0, 3000), (500, 2000), (1000, 1000)]).growth_bps(), -2000);
        // only the last 10 s count: the fast start is forgotten
        let mut late: Vec<(u64, u64)> = vec![(0, 0), (1000, 1_000_000)];
        late.extend((0..=40).map(|i| (20_000 + i * 250, 1_000_000)));
        assert_eq!(of(&late).growth_bps(), 0);
        // one odd sample moves a least-squares slope less than (last - first) / dt
        let odd = of(&[(0, 0), (250, 0), (500, 0), (750, 0), (1000, 64)]);
        assert!((0..256).contains(&odd.growth_bps()), "{}", odd.growth_bps());
    }

    #[test]
    fn the_ring_keeps_the_last_points_and_the_peak_its_first_sighting() {
        let h = of(&(0..300).map(|i| (i, i)).collect::<Vec<_>>());
        let s = h.series();
        assert_eq!(s.as_array().unwrap().len(), POINTS);
        assert_eq!(s[0], serde_json::json!([60, 60]));
        let mut h = History::default();
        assert_eq!(h.peak_ms(), 0);
        h.saw_peak(100, 0);
        assert_eq!(h.peak_ms(), 100);
        h.saw_peak(200, 64);
        h.saw_peak(300, 64);
        h.saw_peak(400, 10);
        assert_eq!(h.peak_ms(), 200);
    }
}
