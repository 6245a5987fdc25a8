//! The live page the coordinator's admin API serves at `/` while a run goes: one
//! self-contained file (inline CSS and script, no network but its own origin) that reads
//! the run's server-sent events (`GET /events`, read with `fetch` so the token typed into
//! the page travels as an `Authorization` header, never in a URL), draws the charts in the
//! browser on the report's axis rules (1-2-5 ticks, SI and time units, log axes by decade,
//! each curve a `<g class="series" data-series=… data-points=N>`), and steers the run
//! (`PUT /rate`, `POST /pause`, `/resume`, `/stop`). When the run is over it shows the
//! run's `report.html` (`GET /report`).
//!
//! The page folds its points as the feed does (at most 1,024, neighbours folded in pairs)
//! so a browser left open on a long run holds a bounded page.

/// The page.
pub const PAGE: &str = include_str!("live.html");

#[cfg(test)]
mod tests {
    use super::PAGE;

    #[test]
    fn the_page_is_self_contained_and_keeps_the_token_out_of_urls() {
        for outside in ["http://", "https://", "//cdn", "@import", "<link", "src=\""] {
            assert!(!PAGE.contains(outside), "the page loads {outside}");
        }
        assert!(PAGE.contains("\"Authorization\": \"Bearer \" + token"));
        assert!(!PAGE.contains("?token"), "the token never goes in a URL");
        assert!(PAGE.contains("class=\\\"series\\\" data-series=\\\""));
        assert!(PAGE.contains("var POINTS = 1024;"));
    }
}
