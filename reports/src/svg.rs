//! Grouped bar charts as inline SVG, drawn from a handful of primitives (rectangles, lines, text) so the HTML report
//! stays self-contained: no script, no external style sheet, no font. Every piece of text is XML-escaped.

use std::fmt::Write as _;

/// Outer size of every chart, in SVG user units (pixels).
const WIDTH_PX: f64 = 760.0;
const HEIGHT_PX: f64 = 360.0;
const MARGIN_LEFT_PX: f64 = 80.0;
const MARGIN_RIGHT_PX: f64 = 20.0;
const MARGIN_TOP_PX: f64 = 56.0;
const MARGIN_BOTTOM_PX: f64 = 56.0;
/// Horizontal grid lines (and y-axis labels) per chart.
const TICK_COUNT: u32 = 5;
/// Colour-blind-safe palette (Okabe–Ito), one colour per series, reused cyclically.
const PALETTE: [&str; 6] = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00"];

/// One bar: its height, an optional interval drawn as a whisker, and the label written above it.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub value: f64,
    pub whisker: Option<(f64, f64)>,
    pub label: String,
}

/// A named series: one optional bar per category.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub bars: Vec<Option<Bar>>,
}

/// A grouped bar chart: categories along x, one bar per series in each group.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<Series>,
    /// A logarithmic y axis from 1 (for figures spanning decades, like latency percentiles); values below 1 sit on
    /// the axis.
    pub log_scale: bool,
}

/// Escapes text for XML and HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The smallest of 1, 2, 5 × a power of ten that is at least `x` (the top of the y axis).
fn nice_ceiling(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|v| *v >= x * (1.0 - 1e-12)).unwrap_or(10.0 * power)
}

/// A y-axis label: three significant figures, with thousands separators for whole numbers from 1,000.
fn tick_label(v: f64) -> String {
    if v >= 1000.0 && v.fract() == 0.0 && v < 1e15 {
        let digits = format!("{v:.0}");
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        return out;
    }
    crate::rates::significant(v, 3)
}

impl BarChart {
    /// The chart as one `<svg>` element.
    pub fn render(&self) -> String {
        let plot_w = WIDTH_PX - MARGIN_LEFT_PX - MARGIN_RIGHT_PX;
        let plot_h = HEIGHT_PX - MARGIN_TOP_PX - MARGIN_BOTTOM_PX;
        let bottom = MARGIN_TOP_PX + plot_h;
        let data_max = self
            .series
            .iter()
            .flat_map(|s| s.bars.iter().flatten())
            .map(|b| b.whisker.map_or(b.value, |(_, high)| high.max(b.value)))
            .fold(0.0, f64::max);
        let (y_max, decades) = if self.log_scale {
            let decades = data_max.max(10.0).log10().ceil();
            (10f64.powf(decades), decades)
        } else {
            (nice_ceiling(data_max), 0.0)
        };
        let log_scale = self.log_scale;
        let y = move |v: f64| {
            let share = if log_scale { v.clamp(1.0, y_max).log10() / decades } else { v.clamp(0.0, y_max) / y_max };
            bottom - share * plot_h
        };
        let ticks: Vec<f64> = if log_scale {
            (0..=decades as u32).map(|d| 10f64.powi(d as i32)).collect()
        } else {
            (0..=TICK_COUNT).map(|t| y_max * f64::from(t) / f64::from(TICK_COUNT)).collect()
        };

        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH_PX}" height="{HEIGHT_PX}" viewBox="0 0 {WIDTH_PX} {HEIGHT_PX}" role="img" aria-label="{title}" font-family="sans-serif" font-size="12">"#,
            title = escape(&self.title)
        );
        let _ = write!(svg, "<title>{}</title>", escape(&self.title));
        let _ = write!(
            svg,
            r#"<text x="{x}" y="20" font-size="15" font-weight="bold">{}</text>"#,
            escape(&self.title),
            x = MARGIN_LEFT_PX
        );
        // Grid and y-axis labels.
        for v in ticks {
            let ty = y(v);
            let _ = write!(
                svg,
                "<line x1=\"{MARGIN_LEFT_PX}\" y1=\"{ty:.1}\" x2=\"{x2}\" y2=\"{ty:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{lx}\" y=\"{ly:.1}\" text-anchor=\"end\">{label}</text>",
                x2 = MARGIN_LEFT_PX + plot_w,
                lx = MARGIN_LEFT_PX - 6.0,
                ly = ty + 4.0,
                label = escape(&tick_label(v)),
            );
        }
        let _ = write!(
            svg,
            r#"<text transform="translate(16 {cy:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            escape(&self.y_label),
            cy = MARGIN_TOP_PX + plot_h / 2.0
        );
        // Bars.
        let groups = self.categories.len().max(1) as f64;
        let group_w = plot_w / groups;
        let bar_w = group_w * 0.8 / self.series.len().max(1) as f64;
        for (ci, category) in self.categories.iter().enumerate() {
            let group_x = MARGIN_LEFT_PX + group_w * ci as f64;
            let _ = write!(
                svg,
                r#"<text x="{x:.1}" y="{ty:.1}" text-anchor="middle">{}</text>"#,
                escape(category),
                x = group_x + group_w / 2.0,
                ty = bottom + 18.0
            );
            for (si, series) in self.series.iter().enumerate() {
                let Some(Some(bar)) = series.bars.get(ci) else { continue };
                let colour = PALETTE[si % PALETTE.len()];
                let x = group_x + group_w * 0.1 + bar_w * si as f64;
                let top = y(bar.value);
                let _ = write!(
                    svg,
                    r#"<rect x="{x:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}" fill="{colour}"><title>{t}</title></rect>"#,
                    w = bar_w * 0.9,
                    h = (bottom - top).max(0.0),
                    t = escape(&format!("{} – {}: {}", series.name, category, bar.label)),
                );
                let mut label_y = top;
                if let Some((low, high)) = bar.whisker {
                    let cx = x + bar_w * 0.45;
                    let (ly, hy) = (y(low), y(high));
                    label_y = label_y.min(hy);
                    let _ = write!(
                        svg,
                        "<line x1=\"{cx:.1}\" y1=\"{ly:.1}\" x2=\"{cx:.1}\" y2=\"{hy:.1}\" stroke=\"#333\"/>\
                         <line x1=\"{a:.1}\" y1=\"{hy:.1}\" x2=\"{b:.1}\" y2=\"{hy:.1}\" stroke=\"#333\"/>",
                        a = cx - bar_w * 0.2,
                        b = cx + bar_w * 0.2,
                    );
                }
                let _ = write!(
                    svg,
                    r#"<text x="{cx:.1}" y="{ty:.1}" text-anchor="middle" font-size="10">{}</text>"#,
                    escape(&bar.label),
                    cx = x + bar_w * 0.45,
                    ty = label_y - 4.0
                );
            }
        }
        // Axes.
        let _ = write!(
            svg,
            r##"<line x1="{MARGIN_LEFT_PX}" y1="{MARGIN_TOP_PX}" x2="{MARGIN_LEFT_PX}" y2="{bottom}" stroke="#333"/><line x1="{MARGIN_LEFT_PX}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#333"/>"##,
            right = MARGIN_LEFT_PX + plot_w
        );
        // Legend, in one row under the title.
        let mut legend_x = MARGIN_LEFT_PX;
        for (si, series) in self.series.iter().enumerate() {
            let colour = PALETTE[si % PALETTE.len()];
            let _ = write!(
                svg,
                r#"<rect x="{legend_x:.1}" y="30" width="12" height="12" fill="{colour}"/><text x="{tx:.1}" y="40">{}</text>"#,
                escape(&series.name),
                tx = legend_x + 16.0
            );
            legend_x += 28.0 + 7.0 * series.name.chars().count() as f64;
        }
        svg.push_str("</svg>");
        svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceiling_table() {
        for (x, want) in
            [(0.0, 1.0), (0.7, 1.0), (1.0, 1.0), (1.2, 2.0), (3.0, 5.0), (6.0, 10.0), (0.031, 0.05), (1234.0, 2000.0)]
        {
            assert!(
                (nice_ceiling(x) - want).abs() < 1e-9 * want,
                "nice_ceiling({x}) = {}, want {want}",
                nice_ceiling(x)
            );
        }
    }

    #[test]
    fn log_scale_ticks_are_powers_of_ten_and_bars_grow_with_their_value() {
        let bar = |value: f64| Some(Bar { value, whisker: None, label: String::new() });
        let chart = BarChart {
            title: "t".to_string(),
            y_label: "ms".to_string(),
            categories: vec!["a".to_string(), "b".to_string()],
            series: vec![Series { name: "s".to_string(), bars: vec![bar(10.0), bar(5000.0)] }],
            log_scale: true,
        };
        let svg = chart.render();
        for tick in [">1<", ">10<", ">100<", ">1,000<", ">10,000<"] {
            assert!(svg.contains(tick), "{tick} missing in {svg}");
        }
        assert!(!svg.contains(">100,000<"));
        let heights: Vec<f64> = svg
            .split("<rect ")
            .skip(1)
            .filter_map(|r| r.split("height=\"").nth(1)?.split('"').next()?.parse().ok())
            .filter(|h: &f64| *h != 12.0) // the legend's swatch
            .collect();
        assert_eq!(heights.len(), 2, "{svg}");
        // log10(10) / 4 decades and log10(5000) / 4 decades of the 248 px plot.
        assert!((heights[0] - 62.0).abs() < 0.2 && (heights[1] - 229.33).abs() < 0.1, "{heights:?}");
    }

    #[test]
    fn escape_table() {
        for (text, want) in [("a<b>&\"c'", "a&lt;b&gt;&amp;&quot;c&#39;"), ("plain", "plain"), ("", "")] {
            assert_eq!(escape(text), want);
        }
    }
}
