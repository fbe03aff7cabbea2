//! Small constructors that register one family each.

use prometheus::{Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramOpts, Opts, Registry};

/// Labels every family of a dialect carries, with their values.
pub type ConstLabels<'a> = &'a [(&'a str, String)];

fn opts(name: &str, help: &str, labels: ConstLabels) -> Opts {
    labels.iter().fold(Opts::new(name, help), |o, (k, v)| {
        o.const_label(*k, v.clone())
    })
}

/// A counter.
pub fn counter(
    reg: &Registry,
    name: &str,
    help: &str,
    labels: ConstLabels,
) -> prometheus::Result<Counter> {
    let c = Counter::with_opts(opts(name, help, labels))?;
    reg.register(Box::new(c.clone()))?;
    Ok(c)
}

/// A counter with variable labels.
pub fn counter_vec(
    reg: &Registry,
    name: &str,
    help: &str,
    labels: ConstLabels,
    variable: &[&str],
) -> prometheus::Result<CounterVec> {
    let c = CounterVec::new(opts(name, help, labels), variable)?;
    reg.register(Box::new(c.clone()))?;
    Ok(c)
}

/// A gauge.
pub fn gauge(
    reg: &Registry,
    name: &str,
    help: &str,
    labels: ConstLabels,
) -> prometheus::Result<Gauge> {
    let g = Gauge::with_opts(opts(name, help, labels))?;
    reg.register(Box::new(g.clone()))?;
    Ok(g)
}

/// A gauge with variable labels (info metrics).
pub fn gauge_vec(
    reg: &Registry,
    name: &str,
    help: &str,
    labels: ConstLabels,
    variable: &[&str],
) -> prometheus::Result<GaugeVec> {
    let g = GaugeVec::new(opts(name, help, labels), variable)?;
    reg.register(Box::new(g.clone()))?;
    Ok(g)
}

/// A histogram with the given buckets.
pub fn histogram(
    reg: &Registry,
    name: &str,
    help: &str,
    labels: ConstLabels,
    buckets: &[f64],
) -> prometheus::Result<Histogram> {
    let h = Histogram::with_opts(
        HistogramOpts::from(opts(name, help, labels)).buckets(buckets.to_vec()),
    )?;
    reg.register(Box::new(h.clone()))?;
    Ok(h)
}
