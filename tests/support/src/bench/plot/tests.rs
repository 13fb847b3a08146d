//! Every chart the benches draw, drawn from fixed figures (those of the run
//! recorded in docs/benchmarks.md, and the shapes a tiny run gives), and
//! checked the way a reader would look at it. The PNGs are left under the
//! system's temporary directory, in `sta-testenv-plots/`, to be looked at.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::*;

/// A chart as a bench asks for it.
enum Chart {
    Bars {
        title: &'static str,
        y_label: &'static str,
        categories: Vec<&'static str>,
        series: Vec<(&'static str, Vec<f64>)>,
        log_y: bool,
        rules: Vec<(f64, &'static str)>,
    },
    Lines {
        title: &'static str,
        x_label: &'static str,
        y_label: &'static str,
        categories: Vec<&'static str>,
        series: Vec<(&'static str, Vec<f64>)>,
    },
}

const API_CATEGORIES: [&str; 10] = [
    "create",
    "get",
    "update",
    "apply",
    "create, 1 VAP",
    "list 10",
    "list 1000",
    "list 1000 rv=0",
    "list 10000",
    "list 10000 rv=0",
];
const TARGETS: [&str; 3] = [
    "ours, direct",
    "ours, via aggregator",
    "CRD in kube-apiserver",
];
const FANOUT_CATEGORIES: [&str; 4] = [
    "to each watcher, p50",
    "to each watcher, p99",
    "to the last watcher, p50",
    "to the last watcher, p99",
];

fn three(values: [[f64; 3]; 10]) -> Vec<(&'static str, Vec<f64>)> {
    (0..3)
        .map(|t| (TARGETS[t], values.iter().map(|row| row[t]).collect()))
        .collect()
}

/// The charts of `benches/compare.rs` and `benches/scale.rs`, by file name.
fn charts() -> Vec<(&'static str, Chart)> {
    vec![
        (
            "throughput",
            Chart::Bars {
                title: "Requests per second (higher is better)",
                y_label: "requests/s",
                categories: API_CATEGORIES.to_vec(),
                series: three([
                    [897.0, 652.0, 421.0],
                    [6678.0, 1008.0, 1134.0],
                    [821.0, 577.0, 384.0],
                    [815.0, 517.0, 284.0],
                    [1081.0, 549.0, 459.0],
                    [2519.0, 703.0, 732.0],
                    [373.0, 179.0, 22.6],
                    [407.0, 178.0, 26.4],
                    [25.6, 20.9, 2.3],
                    [23.8, 23.1, 2.3],
                ]),
                log_y: true,
                rules: vec![],
            },
        ),
        (
            "latency",
            Chart::Bars {
                title: "p50 latency (lower is better)",
                y_label: "ms",
                categories: API_CATEGORIES.to_vec(),
                series: three([
                    [16.97, 23.30, 34.35],
                    [2.33, 14.32, 12.52],
                    [18.42, 26.22, 37.77],
                    [18.25, 29.12, 50.68],
                    [14.44, 26.38, 31.42],
                    [1.50, 4.97, 4.71],
                    [10.43, 21.67, 148.01],
                    [9.49, 21.87, 134.25],
                    [95.29, 174.53, 1635.24],
                    [154.96, 169.31, 1534.51],
                ]),
                log_y: true,
                rules: vec![],
            },
        ),
        (
            "watch",
            Chart::Bars {
                title: "Watch fan-out to 1000 watchers: write → delivery (lower is better)",
                y_label: "ms",
                categories: FANOUT_CATEGORIES.to_vec(),
                series: vec![
                    (TARGETS[0], vec![13.6, 21.5, 19.4, 22.9]),
                    (TARGETS[1], vec![38.0, 90.7, 52.9, 94.3]),
                    (TARGETS[2], vec![20.6, 36.4, 32.2, 40.9]),
                ],
                log_y: false,
                rules: vec![],
            },
        ),
        (
            "ceiling",
            Chart::Bars {
                title: "Through the aggregator, as a fraction of a null backend (higher is better)",
                y_label: "fraction of the ceiling",
                categories: vec![
                    "get req/s",
                    "get p99",
                    "list 10 req/s",
                    "list 10 p99",
                    "watch each p99",
                    "watch last p99",
                ],
                series: vec![
                    (TARGETS[1], vec![0.526, 0.629, 0.603, 0.707, 0.685, 0.723]),
                    (TARGETS[2], vec![0.591, 0.733, 0.628, 0.574, 1.71, 1.67]),
                ],
                log_y: false,
                rules: vec![(1.0, "ceiling"), (0.9, "goal for get")],
            },
        ),
        (
            "ceiling-reached",
            // Values on and just under the reference lines, whose labels
            // must clear them.
            Chart::Bars {
                title: "Through the aggregator, as a fraction of a null backend (higher is better)",
                y_label: "fraction of the ceiling",
                categories: vec!["get req/s", "get p99"],
                series: vec![
                    (TARGETS[1], vec![0.995, 0.9]),
                    (TARGETS[2], vec![0.89, 1.0]),
                ],
                log_y: false,
                rules: vec![(1.0, "ceiling"), (0.95, "goal for get")],
            },
        ),
        (
            "memory",
            Chart::Bars {
                title: "Resident memory",
                y_label: "MiB",
                categories: vec!["idle", "loaded: 15010 of ours, 13010 CRD objects"],
                series: vec![
                    ("our server", vec![24.0, 240.0]),
                    ("kube-apiserver", vec![325.0, 1375.0]),
                ],
                log_y: false,
                rules: vec![],
            },
        ),
        (
            "transfer",
            Chart::Lines {
                title: "Second consent → destination Bound, against volume size",
                x_label: "volume capacity",
                y_label: "ms (median)",
                categories: vec!["1Gi", "100Gi", "10Ti"],
                series: vec![
                    ("NamespaceTransfer", vec![367.0, 363.0, 363.0]),
                    ("kube-controller-manager bind alone", vec![49.0, 49.0, 49.0]),
                ],
            },
        ),
        (
            "clone",
            Chart::Lines {
                title: "Clone: second consent → destination Bound, against volume size",
                x_label: "volume capacity",
                y_label: "ms (median)",
                categories: vec!["1Gi", "1Ti"],
                series: vec![
                    ("Clone-mode NamespaceTransfer", vec![279.0, 279.0]),
                    ("same-namespace CSI clone", vec![55.0, 59.0]),
                ],
            },
        ),
        (
            "scale-cpu",
            Chart::Bars {
                title: "CPU time per transfer, by part",
                y_label: "ms per transfer",
                categories: vec![
                    "100 pairs",
                    "500 pairs",
                    "1000 pairs",
                    "500 pairs, kube-controller-manager at its default rate",
                ],
                series: vec![
                    ("etcd", vec![18.2, 15.5, 16.3, 18.0]),
                    ("kube-apiserver", vec![52.4, 47.5, 50.5, 55.0]),
                    ("kube-controller-manager", vec![5.1, 6.5, 6.9, 6.4]),
                    ("storage-transfer-apiserver", vec![27.3, 25.6, 27.3, 29.7]),
                    ("bench and its kubectl", vec![15.5, 8.5, 7.4, 8.9]),
                    ("everything else", vec![5.3, 4.3, 4.7, 4.9]),
                ],
                log_y: false,
                rules: vec![],
            },
        ),
        (
            "scale-flood",
            Chart::Bars {
                title: "Requests per second while tenant A floods",
                y_label: "requests/s",
                categories: vec!["tenant B alone", "tenant B, flooded", "tenant A"],
                series: vec![
                    ("served", vec![1904.0, 774.0, 409.0]),
                    ("refused (429)", vec![0.0, 0.0, 28.8]),
                ],
                log_y: false,
                rules: vec![],
            },
        ),
        (
            "scale-rate",
            Chart::Lines {
                title: "Transfers per second against pairs filed at once",
                x_label: "pairs filed",
                y_label: "transfers/s",
                categories: vec!["100", "500", "1000"],
                series: vec![("completed per second", vec![16.5, 18.5, 17.7])],
            },
        ),
        (
            "scale-latency",
            Chart::Lines {
                title: "Per-transfer latency (request created → Completed)",
                x_label: "pairs filed",
                y_label: "seconds",
                categories: vec!["100", "500", "1000"],
                series: vec![
                    ("p50", vec![4.411, 19.608, 42.450]),
                    ("p90", vec![4.587, 21.150, 45.320]),
                    ("p99", vec![4.658, 21.555, 46.177]),
                ],
            },
        ),
        (
            "scale-latency-tiny",
            // A tiny run (BENCH_SCALE=0.01) has one size, and lines of one point.
            Chart::Lines {
                title: "Per-transfer latency (request created → Completed)",
                x_label: "pairs filed",
                y_label: "seconds",
                categories: vec!["10"],
                series: vec![
                    ("p50", vec![0.71]),
                    ("p90", vec![0.74]),
                    ("p99", vec![0.74]),
                ],
            },
        ),
        (
            "throughput-missing",
            // A phase that did not run leaves NaN behind.
            Chart::Bars {
                title: "Requests per second (higher is better)",
                y_label: "requests/s",
                categories: API_CATEGORIES[..3].to_vec(),
                series: three_of([
                    [897.0, f64::NAN, 421.0],
                    [6678.0, 1008.0, 1134.0],
                    [821.0, 577.0, f64::NAN],
                ]),
                log_y: true,
                rules: vec![],
            },
        ),
    ]
}

fn three_of(values: [[f64; 3]; 3]) -> Vec<(&'static str, Vec<f64>)> {
    (0..3)
        .map(|t| (TARGETS[t], values.iter().map(|row| row[t]).collect()))
        .collect()
}

fn out_dir() -> PathBuf {
    let dir = std::env::temp_dir().join("sta-testenv-plots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn owned(series: &[(&str, Vec<f64>)]) -> Vec<Series> {
    series
        .iter()
        .map(|(name, values)| Series {
            name: (*name).to_owned(),
            values: values.clone(),
        })
        .collect()
}

fn draw(name: &str, chart: &Chart) -> Drawn {
    let path = out_dir().join(format!("{name}.png"));
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let drawn = match chart {
        Chart::Bars {
            title,
            y_label,
            categories,
            series,
            log_y,
            rules,
        } => {
            let rules: Vec<Rule> = rules
                .iter()
                .map(|(value, label)| Rule {
                    value: *value,
                    label: (*label).to_owned(),
                })
                .collect();
            draw_grouped_bars(
                &path,
                title,
                y_label,
                &strings(categories),
                &owned(series),
                *log_y,
                &rules,
            )
        }
        Chart::Lines {
            title,
            x_label,
            y_label,
            categories,
            series,
        } => draw_lines(
            &path,
            title,
            x_label,
            y_label,
            &strings(categories),
            &owned(series),
        ),
    };
    drawn.unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every chart, drawn once for all the tests.
fn drawn() -> &'static [(&'static str, Drawn)] {
    static DRAWN: OnceLock<Vec<(&'static str, Drawn)>> = OnceLock::new();
    DRAWN.get_or_init(|| {
        charts()
            .iter()
            .map(|(name, chart)| (*name, draw(name, chart)))
            .collect()
    })
}

#[test]
fn every_bench_chart_is_drawn_without_a_layout_problem() {
    let problems: Vec<String> = drawn()
        .iter()
        .flat_map(|(name, d)| {
            d.problems()
                .into_iter()
                .map(move |p| format!("{name}: {p}"))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "charts under {}:\n{}",
        out_dir().display(),
        problems.join("\n")
    );
}

#[test]
fn category_labels_stay_apart_and_under_their_group() {
    for (name, d) in drawn() {
        let ticks: Vec<&Placed> = d.texts(Role::XTick).collect();
        assert!(!ticks.is_empty(), "{name}: no category labels");
        for (i, a) in ticks.iter().enumerate() {
            assert!(
                a.rect.x0 >= d.plot.x0 - 40 && a.rect.x1 <= d.plot.x1 + 40,
                "{name}: {:?} strays from the x axis",
                a.text
            );
            for b in &ticks[i + 1..] {
                let apart = a.rect.x1 + SLOT_GAP / 2 <= b.rect.x0
                    || b.rect.x1 + SLOT_GAP / 2 <= a.rect.x0
                    || a.rect.y1 <= b.rect.y0
                    || b.rect.y1 <= a.rect.y0;
                assert!(apart, "{name}: {:?} runs into {:?}", a.text, b.text);
            }
        }
    }
}

#[test]
fn the_throughput_chart_wraps_its_long_labels_instead_of_running_them_together() {
    let (_, d) = drawn().iter().find(|(n, _)| *n == "throughput").unwrap();
    let lines: Vec<&str> = d.texts(Role::XTick).map(|t| t.text.as_str()).collect();
    assert!(
        lines.iter().all(|l| !l.contains("list 1000 rv=0")),
        "not wrapped: {lines:?}"
    );
    assert!(lines.contains(&"rv=0"), "{lines:?}");
}

#[test]
fn bars_carry_their_values_when_all_fit_and_none_when_some_do_not() {
    for (name, wanted) in [
        ("watch", true),
        ("memory", true),
        ("ceiling", true),
        ("scale-flood", true),
        // 30 or 24 narrow bars: a value over a few of them reads as a stray mark.
        ("throughput", false),
        ("latency", false),
        ("scale-cpu", false),
    ] {
        let (_, d) = drawn().iter().find(|(n, _)| *n == name).unwrap();
        let values = d.texts(Role::Value).count();
        let expected = if wanted { d.marks.len() } else { 0 };
        assert_eq!(
            values,
            expected,
            "{name}: values on {values} of {} bars",
            d.marks.len()
        );
    }
}

#[test]
fn reference_lines_are_labelled_beyond_the_plot() {
    for name in ["ceiling", "ceiling-reached"] {
        let (_, d) = drawn().iter().find(|(n, _)| *n == name).unwrap();
        let labels: Vec<&Placed> = d.texts(Role::RuleLabel).collect();
        assert_eq!(labels.len(), 2, "{name}");
        for (label, rule) in labels.iter().zip(&d.rules) {
            assert!(
                label.rect.x0 >= d.plot.x1,
                "{name}: {:?} inside the plot",
                label.text
            );
            let near = label.rect.y0 - 20 <= rule.y0 && rule.y1 <= label.rect.y1 + 20;
            assert!(near, "{name}: {:?} far from its line", label.text);
        }
    }
}

#[test]
fn every_axis_says_what_it_measures() {
    for ((name, chart), (_, d)) in charts().iter().zip(drawn()) {
        let wanted = match chart {
            Chart::Bars { y_label, .. } => vec![*y_label],
            Chart::Lines {
                x_label, y_label, ..
            } => vec![*y_label, *x_label],
        };
        let descs: Vec<&str> = d.texts(Role::AxisDesc).map(|t| t.text.as_str()).collect();
        assert_eq!(descs, wanted, "{name}");
    }
}

#[test]
fn linear_tick_labels_share_one_unit_and_one_precision() {
    let ticks = |v: &[f64]| tick_labels(v, false);
    assert_eq!(
        ticks(&[0.0, 5000.0, 10000.0, 15000.0, 50000.0]),
        ["0", "5k", "10k", "15k", "50k"]
    );
    assert_eq!(
        ticks(&[0.0, 0.2, 0.4, 1.0, 1.8]),
        ["0", "0.2", "0.4", "1.0", "1.8"]
    );
    assert_eq!(ticks(&[0.0, 200.0, 1400.0]), ["0", "200", "1400"]);
    assert_eq!(ticks(&[0.0, 2.5, 5.0]), ["0", "2.5", "5.0"]);
}

#[test]
fn log_tick_labels_write_each_decade_on_its_own() {
    assert_eq!(
        tick_labels(&[0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0, 1e6], true),
        ["0.1", "1", "10", "100", "1k", "10k", "1M"]
    );
}

#[test]
fn a_drawn_text_stays_inside_the_box_it_was_measured_to() {
    let face = Typeface::system().unwrap();
    for text in [
        "list 10000 rv=0",
        "requests/s",
        "kube-controller-manager",
        "Wj1,",
    ] {
        let (w, h) = face.size(text, LABEL_PX);
        let (cw, ch) = (w as u32 + 40, h as u32 + 40);
        let mut buf = vec![255u8; (cw * ch * 3) as usize];
        {
            let area = BitMapBackend::with_buffer(&mut buf, (cw, ch)).into_drawing_area();
            face.draw(&area, text, (20, 20), LABEL_PX, BLACK.to_rgba(), true)
                .unwrap();
            area.present().unwrap();
        }
        let inked = |x: u32, y: u32| buf[((y * cw + x) * 3) as usize] < 250;
        let mut columns = 0..0;
        for y in 0..ch {
            for x in 0..cw {
                if inked(x, y) {
                    // One pixel of antialiasing either side.
                    let inside =
                        (19..=20 + w as u32).contains(&x) && (19..=20 + h as u32).contains(&y);
                    assert!(
                        inside,
                        "{text:?}: ink at ({x}, {y}) outside {w}x{h} at (20, 20)"
                    );
                    columns = if columns.is_empty() {
                        x..x + 1
                    } else {
                        columns.start.min(x)..columns.end.max(x + 1)
                    };
                }
            }
        }
        // The ink spans most of the measured width: the box is not loose.
        assert!(
            columns.len() as i32 >= w - 4,
            "{text:?}: ink over {} of {w} px",
            columns.len()
        );
    }
}

#[test]
fn a_wrapped_label_breaks_where_its_lines_come_out_most_even() {
    let face = Typeface::system().unwrap();
    let width = face.width("create, 1", LABEL_PX);
    assert_eq!(
        wrap(face, "create, 1 VAP", LABEL_PX, width),
        ["create,", "1 VAP"]
    );
    let wide = face.width("list 10000 rv=0", LABEL_PX);
    assert_eq!(
        wrap(face, "list 10000 rv=0", LABEL_PX, wide),
        ["list 10000 rv=0"]
    );
    assert_eq!(
        break_sets(3, 2),
        [vec![0, 1, 3], vec![0, 2, 3]],
        "cuts of three words into two lines"
    );
}
