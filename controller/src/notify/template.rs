//! `--message-template-*`: the text of a node's notification, with the node's name put in.
//! kured's templates work as they are: `%s` (its default, "Draining node %s") and the Go
//! template forms `{{.}}` and `{{.NodeID}}` name the node, as `{node}` does.

/// What stands for the node's name in a template.
const PLACES: [&str; 5] = ["{node}", "{{.NodeID}}", "{{ .NodeID }}", "{{.}}", "{{ . }}"];

/// The template with every placeholder replaced by `node`; `%s` only once, as Go's
/// `fmt.Sprintf` of kured fills it.
pub fn render(template: &str, node: &str) -> String {
    let mut text = template.to_owned();
    for place in PLACES {
        text = text.replace(place, node);
    }
    text.replacen("%s", node, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_the_node_placeholder_is_filled() {
        for (template, want) in [
            ("Draining node %s", "Draining node n1"),
            ("Node {node} rebooted", "Node n1 rebooted"),
            ("{{.}} is back", "n1 is back"),
            ("{{ .NodeID }} and {{.NodeID}}", "n1 and n1"),
            ("no placeholder", "no placeholder"),
            ("%s then %s", "n1 then %s"),
        ] {
            assert_eq!(render(template, "n1"), want, "{template}");
        }
    }
}
