//! The report's part for `analyze --prometheus`: which label set each
//! `series:<N>` is, worst first, with its growth and verdict.

use super::doc::{Block, Table, heading, para, text};
use crate::Analysis;
use crate::fit::primary_metric;
use crate::phrase;
use crate::store::Scope;

/// A table of the series by label set (nothing when the analysis has no
/// Prometheus series).
pub fn series_table(a: &Analysis) -> Vec<Block> {
    if a.labels.is_empty() {
        return Vec::new();
    }
    let rows = a
        .labels
        .iter()
        .map(|(&i, labels)| {
            let scope = Scope::Series(i);
            let fit = a.fit_of(scope, primary_metric(&a.fits, scope));
            let cell = |f: &dyn Fn(&crate::fit::SeriesFit) -> Option<String>| {
                fit.and_then(f).unwrap_or_else(|| "–".to_string())
            };
            vec![
                scope.to_string(),
                labels.clone(),
                cell(&|f| Some(f.n.to_string())),
                cell(&|f| f.slope.map(|s| phrase::rate(f, s))),
                cell(&|f| {
                    f.slope_ci95.map(|(lo, hi)| {
                        format!("{} … {}", phrase::rate(f, lo), phrase::rate(f, hi))
                    })
                }),
                cell(&|f| Some(f.verdict.as_str().to_string())),
            ]
        })
        .collect();
    vec![
        heading(2, "Series by label set"),
        para(vec![text(
            "One series per label set the query returned, worst first (a restarted one is a \
             new life, labelled leakwatch_life).",
        )]),
        Block::Table(Table::new(
            ["series", "labels", "n", "slope", "95% CI", "verdict"],
            rows,
        )),
    ]
}
