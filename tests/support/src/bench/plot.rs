//! PNG charts of benchmark figures: grouped bar charts and categorical line
//! charts, drawn with `plotters` on its bitmap backend. The module owns the
//! chart layout (size, palette, legend area, number formatting) and the font
//! plotters draws text with: a TrueType font read from the system once per
//! process (Debian package `fonts-dejavu-core`).

use std::fmt::Display;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};

/// Width and height of every chart, in pixels.
const SIZE: (u32, u32) = (1000, 560);

/// A drawing area on a PNG being drawn, in pixels.
type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Series colours, in order; series past the end reuse them.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),  // blue
    RGBColor(255, 127, 14),  // orange
    RGBColor(44, 160, 44),   // green
    RGBColor(214, 39, 40),   // red
    RGBColor(148, 103, 189), // purple
    RGBColor(140, 86, 75),   // brown
    RGBColor(227, 119, 194), // pink
    RGBColor(127, 127, 127), // grey
];

/// Font files tried in order; the first that exists is used.
const FONT_PATHS: [&str; 6] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/ubuntu/Ubuntu-R.ttf",
];

const TITLE_PX: f64 = 24.0;
const AXIS_DESC_PX: f64 = 17.0;
const LABEL_PX: f64 = 14.0;
const VALUE_PX: f64 = 12.0;
const LEGEND_PX: f64 = 15.0;

/// One named series of values, one value per category.
#[derive(Debug)]
pub struct Series {
    /// Shown in the legend.
    pub name: String,
    /// `values[i]` belongs to `categories[i]`; non-finite values are not drawn.
    pub values: Vec<f64>,
}

/// A horizontal reference line across a bar chart (a ceiling, a goal),
/// labelled at its right end.
#[derive(Debug)]
pub struct Rule {
    pub value: f64,
    pub label: String,
}

/// A grouped bar chart: one group per category, one bar per series, a legend.
/// `log_y`: logarithmic y axis (values <= 0 are skipped). Writes a PNG of 1000x560 px.
///
/// Non-finite values are skipped. Each bar carries its value when it fits
/// above the bar. Returns an error when there is nothing to draw, when a
/// series' length differs from the number of categories, or when the font
/// or the file cannot be had.
pub fn grouped_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
    log_y: bool,
) -> Result<(), String> {
    grouped_bars_with_rules(path, title, y_label, categories, series, log_y, &[])
}

/// [`grouped_bars`] with horizontal reference lines drawn over the bars; the
/// y axis spans the lines too. A line whose value cannot be drawn on the
/// axis (not finite, or <= 0 on a log axis) is skipped.
pub fn grouped_bars_with_rules(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
    log_y: bool,
    rules: &[Rule],
) -> Result<(), String> {
    check_shape(categories, series)?;
    let drawable = |v: f64| v.is_finite() && (!log_y || v > 0.0);
    let (mut lo, mut hi) = value_bounds(series, drawable)
        .ok_or_else(|| format!("{title}: no drawable value (finite, and > 0 on a log axis)"))?;
    for rule in rules.iter().filter(|r| drawable(r.value)) {
        (lo, hi) = (lo.min(rule.value), hi.max(rule.value));
    }
    ensure_font()?;

    let canvas = BitMapBackend::new(path, SIZE).into_drawing_area();
    canvas.fill(&WHITE).map_err(err)?;
    let root = canvas.margin(8, 0, 0, 0);
    let (chart_area, legend_area) = split_for_legend(&root, title, series)?;
    draw_legend(&legend_area, series, LegendMark::Swatch)?;

    let n = categories.len();
    let x_range = Slots::new(0.0..n as f64, (0..n).map(|i| i as f64 + 0.5).collect());
    let x_fmt = |x: &f64| category_at(categories, *x - 0.5);
    let y_fmt = |y: &f64| compact(*y);

    // One group spans [i, i + 1): 80% bars, 10% gap on each side.
    let bar_w = 0.8 / series.len() as f64;
    let bar_x = move |cat: usize, s: usize| {
        let x0 = cat as f64 + 0.1 + s as f64 * bar_w;
        (x0, x0 + bar_w)
    };

    macro_rules! draw_bars {
        ($chart:expr, $base:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .y_max_light_lines(4)
                .light_line_style(BLACK.mix(0.06))
                .bold_line_style(BLACK.mix(0.15))
                .x_labels(n)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .y_desc(y_label)
                .label_style(("sans-serif", LABEL_PX))
                .axis_desc_style(("sans-serif", AXIS_DESC_PX))
                .draw()
                .map_err(err)?;
            let base: f64 = $base;
            let mut labels = Vec::new();
            for (s, ser) in series.iter().enumerate() {
                let c = colour(s);
                let bars = ser.values.iter().enumerate().filter_map(|(cat, &v)| {
                    if !drawable(v) {
                        return None;
                    }
                    let (x0, x1) = bar_x(cat, s);
                    Some(Rectangle::new([(x0, base), (x1, v)], c.filled()))
                });
                chart.draw_series(bars).map_err(err)?;
                for (cat, &v) in ser.values.iter().enumerate() {
                    if drawable(v) {
                        let (x0, x1) = bar_x(cat, s);
                        labels.push(((x0 + x1) / 2.0, x0, x1, v));
                    }
                }
            }
            // Values above the bars, where the text fits the bar's width.
            let style = ("sans-serif", VALUE_PX)
                .into_font()
                .color(&BLACK.mix(0.8))
                .pos(Pos::new(HPos::Center, VPos::Bottom));
            let area = chart.plotting_area();
            for (xc, x0, x1, v) in labels {
                let text = compact(v);
                let (tw, _) = area.estimate_text_size(&text, &style).map_err(err)?;
                let (px0, py) = chart.backend_coord(&(x0, v));
                let (px1, _) = chart.backend_coord(&(x1, v));
                if tw as i32 + 2 > px1 - px0 {
                    continue;
                }
                let (pxc, _) = chart.backend_coord(&(xc, v));
                // `canvas` is unshifted: backend pixels are its coordinates.
                canvas
                    .draw(&Text::new(text, (pxc, py - 2), style.clone()))
                    .map_err(err)?;
            }
            let rule_style = ("sans-serif", VALUE_PX)
                .into_font()
                .color(&BLACK.mix(0.8))
                .pos(Pos::new(HPos::Right, VPos::Bottom));
            for rule in rules.iter().filter(|r| drawable(r.value)) {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(0.0, rule.value), (n as f64, rule.value)],
                        BLACK.mix(0.55).stroke_width(2),
                    )))
                    .map_err(err)?;
                let (px, py) = chart.backend_coord(&(n as f64, rule.value));
                canvas
                    .draw(&Text::new(
                        rule.label.clone(),
                        (px - 4, py - 3),
                        rule_style.clone(),
                    ))
                    .map_err(err)?;
            }
        }};
    }

    let mut builder = ChartBuilder::on(&chart_area);
    builder
        .margin(10)
        .margin_right(20)
        .x_label_area_size(36)
        .y_label_area_size(80);
    if log_y {
        // Whole decades around the data, so the axis has labelled ticks.
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf((hi.log10() + 0.15).ceil()).max(lo * 10.0);
        let chart = builder
            .build_cartesian_2d(x_range, (lo..hi).log_scale())
            .map_err(err)?;
        draw_bars!(chart, lo);
    } else {
        let y = padded_linear(lo.min(0.0), hi.max(0.0));
        let chart = builder.build_cartesian_2d(x_range, y).map_err(err)?;
        draw_bars!(chart, 0.0);
    }

    root.present()
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Points joined by lines: x is categorical (e.g. "1 GiB", "100 GiB", "10 TiB"),
/// one line per series with markers, a legend, y from 0. Writes a 1000x560 PNG.
///
/// Non-finite values are skipped (the line breaks there). Returns an error
/// when there is nothing to draw, when a series' length differs from the
/// number of categories, or when the font or the file cannot be had.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
) -> Result<(), String> {
    check_shape(categories, series)?;
    let (lo, hi) =
        value_bounds(series, f64::is_finite).ok_or_else(|| format!("{title}: no finite value"))?;
    ensure_font()?;

    let canvas = BitMapBackend::new(path, SIZE).into_drawing_area();
    canvas.fill(&WHITE).map_err(err)?;
    let root = canvas.margin(8, 0, 0, 0);
    let (chart_area, legend_area) = split_for_legend(&root, title, series)?;
    draw_legend(&legend_area, series, LegendMark::Line)?;

    let n = categories.len();
    let x_range = Slots::new(-0.5..n as f64 - 0.5, (0..n).map(|i| i as f64).collect());
    let mut chart = ChartBuilder::on(&chart_area)
        .margin(10)
        .margin_right(20)
        .x_label_area_size(56)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, padded_linear(lo.min(0.0), hi.max(0.0)))
        .map_err(err)?;
    chart
        .configure_mesh()
        .y_max_light_lines(4)
        .light_line_style(BLACK.mix(0.06))
        .bold_line_style(BLACK.mix(0.15))
        .x_labels(n)
        .x_label_formatter(&|x| category_at(categories, *x))
        .y_label_formatter(&|y| compact(*y))
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", LABEL_PX))
        .axis_desc_style(("sans-serif", AXIS_DESC_PX))
        .draw()
        .map_err(err)?;

    for (s, ser) in series.iter().enumerate() {
        let c = colour(s);
        // Runs of consecutive finite points, each one polyline.
        let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
        let mut run = Vec::new();
        for (i, &v) in ser.values.iter().enumerate() {
            if v.is_finite() {
                run.push((i as f64, v));
            } else if !run.is_empty() {
                runs.push(std::mem::take(&mut run));
            }
        }
        if !run.is_empty() {
            runs.push(run);
        }
        let points: Vec<(f64, f64)> = runs.iter().flatten().copied().collect();
        chart
            .draw_series(
                runs.into_iter()
                    .filter(|r| r.len() > 1)
                    .map(|r| PathElement::new(r, c.stroke_width(3))),
            )
            .map_err(err)?;
        chart
            .draw_series(points.into_iter().map(|p| Circle::new(p, 5, c.filled())))
            .map_err(err)?;
    }

    root.present()
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Registers a system TrueType font as plotters' "sans-serif", once per
/// process; later calls return the first outcome.
fn ensure_font() -> Result<(), String> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let (path, bytes) = FONT_PATHS
            .iter()
            .find_map(|p| std::fs::read(p).ok().map(|b| (*p, b)))
            .ok_or_else(|| {
                format!(
                    "no TrueType font found (tried {}); install the Debian package fonts-dejavu-core",
                    FONT_PATHS.join(", ")
                )
            })?;
        // plotters keeps the font for the rest of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{path}: not a usable TrueType font"))
    })
    .clone()
}

fn err(e: impl Display) -> String {
    format!("plotting: {e}")
}

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn check_shape(categories: &[String], series: &[Series]) -> Result<(), String> {
    if categories.is_empty() {
        return Err("no categories to plot".into());
    }
    if series.is_empty() {
        return Err("no series to plot".into());
    }
    for s in series {
        if s.values.len() != categories.len() {
            return Err(format!(
                "series {:?} has {} values for {} categories",
                s.name,
                s.values.len(),
                categories.len()
            ));
        }
    }
    Ok(())
}

/// Smallest and largest value that `keep` accepts, if any.
fn value_bounds(series: &[Series], keep: impl Fn(f64) -> bool) -> Option<(f64, f64)> {
    series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .filter(|&v| keep(v))
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
        })
}

/// A linear axis over `lo..hi` with 10% headroom (and a unit span when empty).
fn padded_linear(lo: f64, hi: f64) -> Range<f64> {
    let span = hi - lo;
    if span <= 0.0 || !span.is_finite() {
        return lo..lo + 1.0;
    }
    let lo = if lo < 0.0 { lo - span * 0.1 } else { lo };
    let hi = if hi > 0.0 { hi + span * 0.1 } else { hi };
    lo..hi
}

/// The category whose index is nearest to `x`, or "" away from all of them.
fn category_at(categories: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() > 0.01 || i < 0.0 {
        return String::new();
    }
    categories.get(i as usize).cloned().unwrap_or_default()
}

/// A short rendering of `v`: three significant digits or so, with a k/M/G
/// suffix past ten thousand, and no trailing zeros ("2.5", "10", "1M").
fn compact(v: f64) -> String {
    let a = v.abs();
    let (text, suffix) = if a >= 1e10 {
        (format!("{:.0}", v / 1e9), "G")
    } else if a >= 1e9 {
        (format!("{:.1}", v / 1e9), "G")
    } else if a >= 1e7 {
        (format!("{:.0}", v / 1e6), "M")
    } else if a >= 1e6 {
        (format!("{:.1}", v / 1e6), "M")
    } else if a >= 1e4 {
        (format!("{:.0}", v / 1e3), "k")
    } else if a >= 100.0 || a == 0.0 {
        (format!("{v:.0}"), "")
    } else if a >= 10.0 {
        (format!("{v:.1}"), "")
    } else if a >= 1.0 {
        (format!("{v:.2}"), "")
    } else if a >= 0.001 {
        (format!("{v:.3}"), "")
    } else {
        return format!("{v:.1e}");
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}{suffix}")
}

/// A continuous x axis whose only ticks are the given points: the category
/// positions, labelled by `category_at`.
struct Slots {
    inner: RangedCoordf64,
    ticks: Vec<f64>,
}

impl Slots {
    fn new(range: Range<f64>, ticks: Vec<f64>) -> Self {
        Self {
            inner: range.into(),
            ticks,
        }
    }
}

impl Ranged for Slots {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Bold mesh lines and labels at the categories, no light lines.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

/// How the legend marks a series.
enum LegendMark {
    Swatch,
    Line,
}

/// Draws the title, then splits the rest into the chart (left) and a legend
/// column (right) as wide as the longest series name needs.
fn split_for_legend<'a>(
    root: &Area<'a>,
    title: &str,
    series: &[Series],
) -> Result<(Area<'a>, Area<'a>), String> {
    let body = root.titled(title, ("sans-serif", TITLE_PX)).map_err(err)?;
    let style = TextStyle::from(("sans-serif", LEGEND_PX).into_font());
    let mut widest = 0;
    for s in series {
        widest = widest.max(body.estimate_text_size(&s.name, &style).map_err(err)?.0);
    }
    // Mark (30 px) + gap + text + padding; at most 40% of the width.
    let legend_w = (widest + 60).clamp(120, SIZE.0 * 2 / 5);
    Ok(body.split_horizontally(SIZE.0 - legend_w))
}

/// One row per series, at the top of `area`: a colour mark and the name.
fn draw_legend(area: &Area<'_>, series: &[Series], mark: LegendMark) -> Result<(), String> {
    let style = ("sans-serif", LEGEND_PX)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, s) in series.iter().enumerate() {
        let c = colour(i);
        let y = 24 + 26 * i as i32;
        match mark {
            LegendMark::Swatch => area
                .draw(&Rectangle::new([(4, y - 7), (26, y + 7)], c.filled()))
                .map_err(err)?,
            LegendMark::Line => {
                area.draw(&PathElement::new(vec![(2, y), (28, y)], c.stroke_width(3)))
                    .map_err(err)?;
                area.draw(&Circle::new((15, y), 5, c.filled()))
                    .map_err(err)?;
            }
        }
        area.draw(&Text::new(s.name.clone(), (36, y), style.clone()))
            .map_err(err)?;
    }
    Ok(())
}
