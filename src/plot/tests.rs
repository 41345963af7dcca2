//! Rendering tests: every chart kind and edge case renders as SVG and PNG, with the labels,
//! legend rows and layout promises the report relies on.

use super::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;

/// A fresh directory under the system temp dir (no tempfile dependency here).
fn scratch_dir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "leakwatch-plot-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn line(name: &str, points: Vec<(f64, f64)>) -> Line {
    Line {
        name: name.into(),
        points,
    }
}

fn chart(title: &str, lines: Vec<Line>) -> LineChart {
    LineChart {
        title: title.into(),
        x_label: "run".into(),
        y_label: "PSS".into(),
        y_unit: YUnit::Bytes,
        lines,
        fit: None,
        warmup_until: None,
        model: Vec::new(),
        min_y_span: None,
        markers: Vec::new(),
    }
}

fn leak() -> LineChart {
    let mut c = chart(
        "leak <&> \"quoted\"",
        vec![line(
            "pantsd",
            (1..=10)
                .map(|r| (r as f64, (114.0 + 4.67 * r as f64) * MIB))
                .collect(),
        )],
    );
    c.fit = Some(FitOverlay {
        name: "fit".into(),
        slope: 4.67 * MIB,
        intercept: 114.0 * MIB,
        x_from: 2.0,
        x_to: 10.0,
        slope_ci95: Some((4.4 * MIB, 4.9 * MIB)),
        x_mean: None,
        legend_per: None,
        judged_rate: None,
    });
    c.warmup_until = Some(2.0);
    c
}

/// Charts that must render without panicking or erroring.
fn edge_line_charts() -> Vec<LineChart> {
    let mut many = chart(
        "forty processes",
        (0..40)
            .map(|i| {
                line(
                    &format!("p{i}"),
                    (0..500)
                        .map(|k| (k as f64 / 60.0, (i * k) as f64))
                        .collect(),
                )
            })
            .collect(),
    );
    many.y_unit = YUnit::Count;
    many.x_label = "time (h)".into();
    let mut steep_fit = chart("steep fit", vec![line("a", vec![(1.0, 1.0), (2.0, 2.0)])]);
    steep_fit.fit = Some(FitOverlay {
        name: "fit".into(),
        slope: 1e12,
        intercept: -5e12,
        x_from: 1.0,
        x_to: 2.0,
        slope_ci95: Some((-1e13, 1e13)),
        x_mean: Some(1.5),
        legend_per: None,
        judged_rate: None,
    });
    vec![
        chart("no lines", vec![]),
        chart("empty line", vec![line("empty", vec![])]),
        chart("single point", vec![line("one", vec![(3.0, 5.0 * MIB)])]),
        chart(
            "all equal",
            vec![line(
                "flat",
                (1..=6).map(|r| (r as f64, 7.0 * MIB)).collect(),
            )],
        ),
        chart(
            "all zero",
            vec![line("zero", (1..=6).map(|r| (r as f64, 0.0)).collect())],
        ),
        chart(
            "huge",
            vec![line(
                "big",
                (1..=8)
                    .map(|r| (r as f64, (30.0 + r as f64) * GIB))
                    .collect(),
            )],
        ),
        chart(
            "non-finite skipped",
            vec![line(
                "nan",
                vec![
                    (1.0, f64::NAN),
                    (2.0, 3.0),
                    (f64::INFINITY, 1.0),
                    (3.0, 4.0),
                ],
            )],
        ),
        chart("unnamed", vec![line("", vec![(0.5, 1.0), (1.5, 2.0)])]),
        many,
        steep_fit,
        leak(),
        odd_models(true),
        odd_models(false),
        {
            let mut c = odd_models(true);
            c.model.remove(3);
            c
        },
    ]
}

/// Model lines and markers that must not break a chart: empty, all gaps, one point,
/// huge values, markers on top of each other, without data.
fn odd_models(with_data: bool) -> LineChart {
    let data = if with_data {
        vec![line(
            "a",
            (1..=5).map(|r| (r as f64, r as f64 * MIB)).collect(),
        )]
    } else {
        vec![]
    };
    let mut c = chart("odd models", data);
    let model = |points: Vec<(f64, f64)>, style| ModelLine {
        name: format!("{} points", points.len()),
        points,
        style,
    };
    c.model = vec![
        model(vec![], ModelStyle::Steps),
        model(vec![(f64::NAN, f64::NAN); 3], ModelStyle::Envelope),
        model(vec![(2.0, 2.0 * MIB)], ModelStyle::Steps),
        model(vec![(1.0, 1e300), (5.0, -1e300)], ModelStyle::Envelope),
        model(
            vec![(0.0, 40.0 * MIB), (9.0, -4.0 * MIB)],
            ModelStyle::Envelope,
        ),
    ];
    c.markers = vec![
        (3.0, "same place".into()),
        (3.0, "same place".into()),
        (f64::NAN, "nowhere".into()),
        (4.0, String::new()),
        (2.0, "very long ".repeat(40)),
    ];
    c
}

fn edge_bar_charts() -> Vec<BarChart> {
    let bar = |title: &str, bars: Vec<(&str, f64)>| BarChart {
        title: title.into(),
        y_unit: YUnit::Bytes,
        bars: bars.into_iter().map(|(l, v)| (l.to_string(), v)).collect(),
    };
    vec![
        bar("no bars", vec![]),
        bar("zero bar", vec![("[heap]", 0.0)]),
        bar(
            "mixed",
            vec![
                ("[heap]", 31.0 * MIB),
                ("/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", 1.1 * MIB),
                ("[stack]", -4096.0),
                ("nan", f64::NAN),
            ],
        ),
        bar("huge", vec![("anonymous", 40.0 * GIB)]),
        BarChart {
            title: "many counts".into(),
            y_unit: YUnit::Count,
            bars: (0..60)
                .map(|i| (format!("/x/{i}/{}", "y".repeat(i)), i as f64))
                .collect(),
        },
    ]
}

/// Deterministic noise in [-1, 1) (no rand dependency): a hash of `i`.
fn noise(i: u64) -> f64 {
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ 0xdead_beef;
    (h.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// An LRU daemon: +2 MiB/run for 6 runs, flat for 7, one +2 MiB step at
/// run 14, flat for 10; modelled as three segments with two markers.
fn step_series() -> LineChart {
    let y = |r: u64| {
        let level = match r {
            1..=6 => 100.0 + 2.0 * r as f64,
            7..=13 => 112.0,
            _ => 114.0,
        };
        (level + 0.15 * noise(r)) * MIB
    };
    let mut c = chart(
        "survivors anon per run: plateau",
        vec![line(
            "survivors anon",
            (1..=24).map(|r| (r as f64, y(r))).collect(),
        )],
    );
    c.model = vec![ModelLine {
        name: "segments".into(),
        points: vec![
            (1.0, 102.0 * MIB),
            (6.0, 112.0 * MIB),
            (6.0, f64::NAN),
            (7.0, 112.0 * MIB),
            (13.0, 112.0 * MIB),
            (13.0, f64::NAN),
            (14.0, 114.0 * MIB),
            (24.0, 114.0 * MIB),
        ],
        style: ModelStyle::Steps,
    }];
    c.markers = vec![
        (7.0, "plateau from run 7".into()),
        (14.0, "step +2.00 MiB".into()),
    ];
    c
}

/// A GC'd daemon under attach: 20-50 MiB of churn freed every ~23 s, 100 KiB/s kept, one
/// sample a second for 10 minutes; the trough envelope is the 10th percentile per minute.
fn saw_tooth() -> LineChart {
    let pts: Vec<(f64, f64)> = (0..600u64)
        .map(|s| {
            let t = s as f64;
            let kept = 180.0 * MIB + 100.0 * 1024.0 * t;
            let phase = (t % 23.0) / 23.0;
            let churn = (20.0 + 30.0 * phase) * MIB * phase;
            (t / 60.0, kept + churn + 0.4 * MIB * noise(s))
        })
        .collect();
    let troughs: Vec<(f64, f64)> = pts
        .chunks(60)
        .map(|w| {
            let mut ys: Vec<f64> = w.iter().map(|p| p.1).collect();
            ys.sort_by(f64::total_cmp);
            let x = w.iter().map(|p| p.0).sum::<f64>() / w.len() as f64;
            (x, ys[ys.len() / 10])
        })
        .collect();
    let mut c = chart(
        "target anon over time: leak",
        vec![line("target anon", pts)],
    );
    c.x_label = "time (min)".into();
    c.model = vec![ModelLine {
        name: "troughs (10th percentile per minute)".into(),
        points: troughs,
        style: ModelStyle::Envelope,
    }];
    c
}

/// The model charts, plus a model that runs past the data on both sides.
fn model_charts() -> Vec<LineChart> {
    let mut wide = step_series();
    wide.title = "model past the data".into();
    wide.model[0].points.insert(0, (-50.0, 90.0 * MIB));
    wide.model[0].points.push((80.0, 114.0 * MIB));
    wide.markers.push((99.0, "outside".into()));
    let mut crowded = step_series();
    crowded.title = "crowded markers".into();
    crowded.warmup_until = Some(2.0);
    crowded.markers = [
        (2.0, "fill starts"),
        (6.5, "fill stops at +12.0 MiB"),
        (7.0, "plateau from run 7"),
        (13.5, "step +2.00 MiB"),
        (14.0, "a fourth label with nowhere to go"),
        (24.0, "last run"),
    ]
    .into_iter()
    .map(|(x, l)| (x, l.to_string()))
    .collect();
    vec![step_series(), saw_tooth(), wide, crowded]
}

#[test]
fn model_lines_render_with_legend_rows_and_markers() {
    let dir = scratch_dir("model");
    for (c, names) in [
        (
            step_series(),
            vec!["segments", "plateau from run 7", "step +2.00 MiB"],
        ),
        (saw_tooth(), vec!["troughs (10th percentile per minute)"]),
    ] {
        let svg = line_chart_svg(&c).unwrap();
        for name in names {
            assert!(svg.contains(&format!(">\n{name}\n<")), "{name} missing");
        }
        // Drawn in the model colour (vermillion), solid for steps, dashed for troughs.
        assert!(svg.contains("#D55E00"), "{}", c.title);
        let p = dir.join("model.png");
        std::fs::write(&p, line_chart_png(&c).unwrap()).unwrap();
        assert!(std::fs::read(&p).unwrap().starts_with(b"\x89PNG"));
    }
    for (i, c) in model_charts().iter().enumerate() {
        line_chart_svg(c).unwrap();
        std::fs::write(
            dir.join(format!("model{i}.png")),
            line_chart_png(c).unwrap(),
        )
        .unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every point of the model's polylines lies inside the plotting area (the grid's extent).
#[test]
fn model_is_clipped_to_the_plot() {
    let svg = line_chart_svg(&model_charts()[2]).unwrap();
    let xs_of = |line: &str| -> Vec<f64> {
        let pts = line
            .split("points=\"")
            .nth(1)
            .unwrap_or("")
            .split('"')
            .next()
            .unwrap_or("");
        pts.split_whitespace()
            .filter_map(|p| p.split(',').next()?.parse().ok())
            .collect()
    };
    // The axes (and their tick marks, which point out of the plot) are grey polylines:
    // the y axis is the first, the x axis runs from it to the plot's right edge.
    let axes: Vec<Vec<f64>> = svg
        .lines()
        .filter(|l| l.contains("<polyline") && l.contains("#888888"))
        .map(xs_of)
        .collect();
    let lo = axes[0][0];
    let hi = axes
        .iter()
        .flatten()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let model: Vec<f64> = svg
        .lines()
        .filter(|l| l.contains("<polyline") && l.contains("#D55E00"))
        .flat_map(xs_of)
        .collect();
    assert!(!model.is_empty());
    assert!(
        model.iter().all(|x| *x >= lo && *x <= hi),
        "{lo}..{hi}: {model:?}"
    );
    assert!(!svg.contains(">\noutside\n<"));
}

#[test]
fn model_widens_the_y_range() {
    let mut c = step_series();
    c.model[0].points.push((24.0, 300.0 * MIB));
    let svg = line_chart_svg(&c).unwrap();
    assert!(svg.contains("\n300\n</text>"), "a tick at 300 MiB");
}

#[test]
fn line_svg_is_nonempty_self_contained_and_titled() {
    for c in edge_line_charts() {
        let svg = line_chart_svg(&c).unwrap();
        assert!(svg.starts_with("<svg"), "{}", c.title);
        assert!(svg.contains("<text"), "{}", c.title);
        assert!(
            !svg.contains("href") && !svg.contains("url("),
            "{}",
            c.title
        );
        let escaped = c
            .title
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;");
        assert!(svg.contains(&escaped), "title missing: {}", c.title);
    }
}

#[test]
fn oversized_legend_is_summarised() {
    let svg = line_chart_svg(&edge_line_charts()[8]).unwrap();
    assert!(svg.contains("more"), "40 lines can't all be listed");
    assert!(svg.contains(">\np0\n<"));
}

#[test]
fn svg_labels_axis_with_unit_and_fit() {
    let svg = line_chart_svg(&leak()).unwrap();
    assert!(svg.contains("PSS (MiB)"));
    assert!(svg.contains("warm-up"));
    assert!(svg.contains("fit: +4.67 MiB per run"));
    assert!(svg.contains("95% CI: +4.40 to +4.90 MiB per run"));
    let huge = line_chart_svg(&edge_line_charts()[5]).unwrap();
    assert!(huge.contains("PSS (GiB)"));
}

#[test]
fn run_axis_has_integer_ticks_only() {
    let svg = line_chart_svg(&leak()).unwrap();
    for r in 1..=10 {
        assert!(svg.contains(&format!("\n{r}\n</text>")), "tick {r}");
    }
    assert!(!svg.contains("\n1.5\n</text>"));
}

#[test]
fn bar_svg_is_nonempty_and_titled() {
    for c in edge_bar_charts() {
        let svg = bar_chart_svg(&c).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains(&c.title),
            "{}",
            c.title
        );
    }
    let svg = bar_chart_svg(&edge_bar_charts()[2]).unwrap();
    assert!(svg.contains("libpython3.11.so.1.0"));
    assert!(svg.contains("+31.0 MiB"));
}

#[test]
fn long_title_and_legend_names_are_shortened() {
    let c = chart(
        &format!("leak in {}", "python3 -m pants --flag ".repeat(30)),
        vec![
            line(&"worker --config /etc/x.toml ".repeat(20), vec![(1.0, 1.0)]),
            line("short", vec![(2.0, 2.0)]),
        ],
    );
    let svg = line_chart_svg(&c).unwrap();
    assert!(svg.contains("leak in python3"));
    assert_eq!(svg.matches('…').count(), 2, "title and one legend row");
    let dir = scratch_dir("long");
    std::fs::write(dir.join("long.png"), line_chart_png(&c).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn long_bar_labels_keep_their_end() {
    let c = BarChart {
        title: "t".into(),
        y_unit: YUnit::Count,
        bars: vec![(format!("/{}/libfoo.so.1", "deep/".repeat(40)), 1.0)],
    };
    let svg = bar_chart_svg(&c).unwrap();
    assert!(svg.contains("…/"));
    assert!(svg.contains("libfoo.so.1"));
}

#[test]
fn pngs_render_for_edge_cases() {
    let dir = scratch_dir("png");
    for (i, c) in edge_line_charts().iter().enumerate() {
        let p = dir.join(format!("line{i}.png"));
        std::fs::write(&p, line_chart_png(c).unwrap()).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert!(
            bytes.starts_with(b"\x89PNG") && bytes.len() > 1000,
            "{}",
            c.title
        );
    }
    for (i, c) in edge_bar_charts().iter().enumerate() {
        let p = dir.join(format!("bar{i}.png"));
        std::fs::write(&p, bar_chart_png(c).unwrap()).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() > 1000, "{}", c.title);
    }
    // Only the requested files: temp files were renamed, not left behind.
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pngs_are_whole_images_of_the_chart_size() {
    for bytes in [
        line_chart_png(&leak()).unwrap(),
        bar_chart_png(&edge_bar_charts()[2]).unwrap(),
    ] {
        let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        let reader = decoder.read_info().unwrap();
        let info = reader.info();
        assert!(
            info.width >= 400 && info.height >= 200,
            "{}x{}",
            info.width,
            info.height
        );
    }
}
