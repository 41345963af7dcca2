//! Points kept in bounded memory: a series of any length is held as at most
//! `cap` buckets of consecutive points, each the mean of `per` of them.
//! When the buckets fill, neighbours are merged in pairs and `per` doubles,
//! so a day of 1 s samples costs the same memory as ten minutes of them.

/// A growing series of `(x, y)` points, averaged into at most `cap` buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct Thinned {
    cap: usize,
    /// Points per full bucket (a power of two).
    per: u64,
    /// Full buckets: (mean x, mean y).
    full: Vec<(f64, f64)>,
    /// The bucket being filled: sums and count.
    open: (f64, f64, u64),
    /// Points pushed in all.
    count: u64,
}

impl Thinned {
    /// `cap` is rounded up to an even number of at least 2.
    pub fn new(cap: usize) -> Self {
        Thinned {
            cap: cap.max(2).next_multiple_of(2),
            per: 1,
            full: Vec::new(),
            open: (0.0, 0.0, 0),
            count: 0,
        }
    }

    pub fn push(&mut self, x: f64, y: f64) {
        self.count += 1;
        self.open.0 += x;
        self.open.1 += y;
        self.open.2 += 1;
        if self.open.2 < self.per {
            return;
        }
        let n = self.open.2 as f64;
        self.full.push((self.open.0 / n, self.open.1 / n));
        self.open = (0.0, 0.0, 0);
        if self.full.len() >= self.cap {
            self.full = self
                .full
                .chunks(2)
                .map(|c| {
                    let k = c.len() as f64;
                    (
                        c.iter().map(|p| p.0).sum::<f64>() / k,
                        c.iter().map(|p| p.1).sum::<f64>() / k,
                    )
                })
                .collect();
            self.per *= 2;
        }
    }

    /// Points pushed, before any averaging.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// How many points each bucket averages (1 while nothing was merged).
    pub fn per_bucket(&self) -> u64 {
        self.per
    }

    /// The buckets in order, the last one partly filled.
    pub fn points(&self) -> Vec<(f64, f64)> {
        let mut out = self.full.clone();
        if self.open.2 > 0 {
            let n = self.open.2 as f64;
            out.push((self.open.0 / n, self.open.1 / n));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_series_are_kept_as_they_are() {
        let mut t = Thinned::new(8);
        for i in 0..5 {
            t.push(f64::from(i), f64::from(i * 10));
        }
        assert_eq!(t.points().len(), 5);
        assert_eq!(t.points()[4], (4.0, 40.0));
    }

    #[test]
    fn long_series_stay_within_the_cap_and_keep_their_line() {
        let mut t = Thinned::new(64);
        for i in 0..100_000 {
            t.push(f64::from(i), 3.0 * f64::from(i) + 7.0);
        }
        let pts = t.points();
        assert!(pts.len() <= 64 && pts.len() >= 32, "{}", pts.len());
        assert_eq!(t.count(), 100_000);
        // Means of consecutive points of a line lie on the line.
        for (x, y) in pts {
            assert!((y - (3.0 * x + 7.0)).abs() < 1e-6);
        }
    }
}
