//! Tool names as providers accept them: `mcp__<server>__<tool>`, `[a-zA-Z0-9_-]` only, at most
//! 64 characters (a long name keeps its start and gets a short hash of the whole).

/// The longest tool name providers accept.
pub const MAX_NAME: usize = 64;

fn sanitise(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A short, stable hash (FNV-1a) of a name, in hex.
fn short_hash(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", hash & 0xffff_ffff)
}

/// The name the model calls a server's tool by.
pub fn tool_name(server: &str, tool: &str) -> String {
    let name = format!("mcp__{}__{}", sanitise(server), sanitise(tool));
    if name.len() <= MAX_NAME {
        return name;
    }
    let hash = short_hash(&name);
    format!("{}_{hash}", &name[..MAX_NAME - hash.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_and_capped() {
        assert_eq!(tool_name("files", "read"), "mcp__files__read");
        assert_eq!(
            tool_name("my server", "get.item/v2"),
            "mcp__my_server__get_item_v2"
        );
        let long = tool_name("a-very-long-server-name", &"tool".repeat(20));
        assert_eq!(long.len(), MAX_NAME);
        assert_ne!(
            long,
            tool_name("a-very-long-server-name", &"tool".repeat(21))
        );
    }
}
