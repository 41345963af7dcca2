//! JUnit XML for CI systems: one test case per gated check.

use super::html::escape;
use crate::gate::GateResult;

/// Renders the gate as one `<testsuite>` named `leakwatch`.
pub fn render(result: &GateResult) -> String {
    let failures = result.checks.iter().filter(|c| !c.passed).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites><testsuite name=\"leakwatch\" tests=\"{}\" failures=\"{failures}\">\n",
        result.checks.len()
    ));
    for check in &result.checks {
        out.push_str(&format!(
            "  <testcase classname=\"leakwatch.gate\" name=\"{}\">",
            escape(&check.name)
        ));
        if check.passed {
            out.push_str(&format!(
                "<system-out>{}</system-out>",
                escape(&check.message)
            ));
        } else {
            out.push_str(&format!(
                "<failure message=\"{}\">{}</failure>",
                escape(&check.message),
                escape(&check.message)
            ));
        }
        out.push_str("</testcase>\n");
    }
    out.push_str("</testsuite></testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::{Check, Rule};
    use crate::store::Scope;

    #[test]
    fn failures_carry_the_numbers_and_names_are_escaped() {
        let result = GateResult::from_checks(
            Rule::Ci,
            vec![
                Check {
                    name: "survivors pss_bytes ≤ 1MiB/run".into(),
                    series: Scope::Survivors,
                    metric: "pss_bytes".into(),
                    limit: "1MiB/run".into(),
                    passed: false,
                    undecided: false,
                    message: "grows 4.00 MiB/run > 1 MiB/run <&>".into(),
                },
                Check {
                    name: "peak".into(),
                    series: Scope::Command,
                    metric: "rss_bytes".into(),
                    limit: "2GiB".into(),
                    passed: true,
                    undecided: false,
                    message: "ok".into(),
                },
            ],
        );
        let xml = render(&result);
        assert!(xml.contains("tests=\"2\" failures=\"1\""));
        assert!(
            xml.contains("<failure message=\"grows 4.00 MiB/run &gt; 1 MiB/run &lt;&amp;&gt;\"")
        );
        assert!(!result.passed);
        assert_eq!(result.violations.len(), 1);
    }
}
