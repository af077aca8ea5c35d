//! ACP prompt content blocks → engine user input.

use talaria_protocol::acp::{ContentBlock, EmbeddedResourceResource};
use talaria_provider::UserPart;

/// Converts prompt blocks. Images become image parts when the model accepts them; anything the
/// model cannot take is replaced by a short note so the model knows it was there.
pub fn to_user_parts(blocks: Vec<ContentBlock>, images_allowed: bool) -> Vec<UserPart> {
    let mut parts = Vec::with_capacity(blocks.len());
    for block in blocks {
        match block {
            ContentBlock::Text(text) => parts.push(UserPart::Text(text.text)),
            ContentBlock::Image(image) if images_allowed => parts.push(UserPart::Image {
                mime_type: image.mime_type,
                data: image.data,
            }),
            ContentBlock::Image(image) => parts.push(UserPart::Text(format!(
                "[An image ({}) was attached, but the current model does not accept images.]",
                image.mime_type
            ))),
            ContentBlock::Audio(audio) => parts.push(UserPart::Text(format!(
                "[An audio clip ({}) was attached; audio is not supported.]",
                audio.mime_type
            ))),
            ContentBlock::ResourceLink(link) => {
                let mut text = format!("[Referenced: {}]({})", link.name, link.uri);
                if let Some(description) = link.description.filter(|d| !d.is_empty()) {
                    text.push_str(&format!(" — {description}"));
                }
                parts.push(UserPart::Text(text));
            }
            ContentBlock::Resource(resource) => match resource.resource {
                EmbeddedResourceResource::TextResourceContents(contents) => {
                    parts.push(UserPart::Text(format!(
                        "<context ref=\"{}\">\n{}\n</context>",
                        contents.uri, contents.text
                    )));
                }
                EmbeddedResourceResource::BlobResourceContents(blob) => {
                    let mime = blob.mime_type.unwrap_or_default();
                    if images_allowed && mime.starts_with("image/") {
                        parts.push(UserPart::Image {
                            mime_type: mime,
                            data: blob.blob,
                        });
                    } else {
                        parts.push(UserPart::Text(format!(
                            "[Binary resource {} ({}) attached; its content is not shown.]",
                            blob.uri,
                            if mime.is_empty() {
                                "unknown type"
                            } else {
                                &mime
                            }
                        )));
                    }
                }
                _ => parts.push(UserPart::Text(
                    "[An unsupported resource was attached.]".into(),
                )),
            },
            _ => parts.push(UserPart::Text(
                "[An unsupported content block was attached.]".into(),
            )),
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(json: serde_json::Value) -> Vec<ContentBlock> {
        serde_json::from_value(json).expect("blocks")
    }

    #[test]
    fn every_block_kind_reaches_the_model() {
        let parts = to_user_parts(
            blocks(serde_json::json!([
                {"type": "text", "text": "hi"},
                {"type": "resource_link", "uri": "file:///a/b.rs", "name": "b.rs"},
                {"type": "resource", "resource": {"uri": "file:///a/c.rs", "text": "fn c() {}"}},
                {"type": "image", "data": "AAA", "mimeType": "image/png"},
            ])),
            true,
        );
        assert_eq!(parts[0], UserPart::Text("hi".into()));
        assert_eq!(
            parts[1],
            UserPart::Text("[Referenced: b.rs](file:///a/b.rs)".into())
        );
        assert_eq!(
            parts[2],
            UserPart::Text("<context ref=\"file:///a/c.rs\">\nfn c() {}\n</context>".into())
        );
        assert_eq!(
            parts[3],
            UserPart::Image {
                mime_type: "image/png".into(),
                data: "AAA".into()
            }
        );
        let no_images = to_user_parts(
            blocks(serde_json::json!([{"type": "image", "data": "AAA", "mimeType": "image/png"}])),
            false,
        );
        assert!(matches!(&no_images[0], UserPart::Text(t) if t.contains("does not accept images")));
    }
}
