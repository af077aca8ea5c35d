//! Code the walker cannot see statically: variables that may hold code or programs,
//! arithmetic that evaluates names, builtins that assign or hide code.

use tree_sitter::Node;

use super::Walker;
use crate::shell::safety::targets::Cwd;
use crate::shell::safety::variables::*;
use crate::shell::safety::words::text;

impl Walker<'_> {
    /// A variable whose value is now only known at run time.
    pub(in crate::shell::safety) fn taint(&mut self, name: &str) {
        self.vars.remove(name);
        self.tainted.insert(name.to_string());
    }

    /// Checks one name evaluated as arithmetic: its value may be code (`a[$(…)]`).
    pub(in crate::shell::safety) fn arithmetic_name(&mut self, name: &str) {
        let code = |value: &str| value.contains(['[', '$', '`']);
        let why = if self.tainted.contains(name) {
            Some("only known at run time")
        } else if self.vars.get(name).is_some_and(|v| code(v)) {
            Some("text that can run commands")
        } else if !self.vars.contains_key(name) && self.start_unknown() {
            Some("set by earlier input to this shell")
        } else {
            None
        };
        if let Some(why) = why {
            self.mark_unknown(format!(
                "`{name}` is evaluated as arithmetic and holds {why}"
            ));
        }
    }

    pub(in crate::shell::safety) fn start_unknown(&self) -> bool {
        matches!(self.start, Cwd::Unknown)
    }

    /// An arithmetic context (`$((…))`, `((…))`, a subscript, `let`, a numeric test): every
    /// name it evaluates.
    pub(in crate::shell::safety) fn arithmetic(&mut self, node: Node, src: &str) {
        let mut cursor = node.walk();
        let mut stack = vec![node];
        while let Some(current) = stack.pop() {
            match current.kind() {
                // Commands inside are walked as commands.
                "command_substitution" | "process_substitution" => {}
                "variable_name" | "word" => {
                    for name in identifiers(text(current, src)) {
                        self.arithmetic_name(name);
                    }
                }
                "raw_string" | "string" if text(current, src).contains('[') => {
                    self.mark_unknown("a quoted array subscript is evaluated as arithmetic");
                }
                _ => stack.extend(current.named_children(&mut cursor)),
            }
        }
    }

    /// `let` and `declare -i` evaluate their words as arithmetic.
    pub(in crate::shell::safety) fn arithmetic_text(&mut self, expression: &str) {
        for name in identifiers(expression) {
            self.arithmetic_name(name);
        }
        if expression.contains("$(") || expression.contains('`') {
            self.mark_unknown("code inside an arithmetic expression");
        }
    }

    /// `[[ A -eq B ]]` and friends evaluate both sides as arithmetic.
    pub(in crate::shell::safety) fn numeric_test(&mut self, node: Node, src: &str) {
        let mut cursor = node.walk();
        let mut stack = vec![node];
        while let Some(current) = stack.pop() {
            if current.kind() == "binary_expression" {
                let operator = current
                    .child_by_field_name("operator")
                    .map(|o| text(o, src))
                    .unwrap_or("");
                if matches!(operator, "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge") {
                    for side in ["left", "right"] {
                        if let Some(side) = current.child_by_field_name(side) {
                            self.arithmetic(side, src);
                        }
                    }
                }
            }
            if current.kind() == "unary_expression" && text(current, src).contains("-v") {
                self.arithmetic(current, src);
            }
            stack.extend(current.named_children(&mut cursor));
        }
    }
}
