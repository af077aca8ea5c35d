//! ACP prompt content blocks → engine user input: the blocks as received (for the record and
//! replay) and the parts the model sees.

use talaria_engine::UserInput;
use talaria_protocol::acp::{ContentBlock, EmbeddedResourceResource};
use talaria_record::{InputBlock, UserPart};

/// Converts a prompt: the blocks as the client sent them, and what the model sees of them.
pub fn to_user_input(blocks: Vec<ContentBlock>, images_allowed: bool) -> UserInput {
    UserInput {
        blocks: blocks.iter().map(as_received).collect(),
        model_view: to_user_parts(blocks, images_allowed),
    }
}

/// One block as received, in the record's protocol-neutral form.
fn as_received(block: &ContentBlock) -> InputBlock {
    match block {
        ContentBlock::Text(text) => InputBlock::Text {
            text: text.text.clone(),
        },
        ContentBlock::Image(image) => InputBlock::Image {
            mime_type: image.mime_type.clone(),
            data: image.data.clone(),
            uri: image.uri.clone(),
        },
        ContentBlock::Audio(audio) => InputBlock::Audio {
            mime_type: audio.mime_type.clone(),
            data: audio.data.clone(),
        },
        ContentBlock::ResourceLink(link) => InputBlock::ResourceLink {
            uri: link.uri.clone(),
            name: link.name.clone(),
            description: link.description.clone(),
            mime_type: link.mime_type.clone(),
        },
        ContentBlock::Resource(resource) => match &resource.resource {
            EmbeddedResourceResource::TextResourceContents(contents) => InputBlock::Resource {
                uri: contents.uri.clone(),
                mime_type: contents.mime_type.clone(),
                text: Some(contents.text.clone()),
                blob: None,
            },
            EmbeddedResourceResource::BlobResourceContents(blob) => InputBlock::Resource {
                uri: blob.uri.clone(),
                mime_type: blob.mime_type.clone(),
                text: None,
                blob: Some(blob.blob.clone()),
            },
            other => InputBlock::Other {
                json: serde_json::to_value(other).unwrap_or_default(),
            },
        },
        other => InputBlock::Other {
            json: serde_json::to_value(other).unwrap_or_default(),
        },
    }
}

/// Converts prompt blocks. Images become image parts when the model accepts them; anything the
/// model cannot take is replaced by a short note so the model knows it was there.
fn to_user_parts(blocks: Vec<ContentBlock>, images_allowed: bool) -> Vec<UserPart> {
    let mut parts = Vec::with_capacity(blocks.len());
    for block in blocks {
        match block {
            ContentBlock::Text(text) => parts.push(UserPart::text(text.text)),
            ContentBlock::Image(image) if images_allowed => parts.push(UserPart::Image {
                mime_type: image.mime_type,
                data: image.data,
            }),
            ContentBlock::Image(image) => parts.push(UserPart::text(format!(
                "[An image ({}) was attached, but the current model does not accept images.]",
                image.mime_type
            ))),
            ContentBlock::Audio(audio) => parts.push(UserPart::text(format!(
                "[An audio clip ({}) was attached; audio is not supported.]",
                audio.mime_type
            ))),
            ContentBlock::ResourceLink(link) => {
                let mut text = format!("[Referenced: {}]({})", link.name, link.uri);
                if let Some(description) = link.description.filter(|d| !d.is_empty()) {
                    text.push_str(&format!(" — {description}"));
                }
                parts.push(UserPart::text(text));
            }
            ContentBlock::Resource(resource) => match resource.resource {
                EmbeddedResourceResource::TextResourceContents(contents) => {
                    parts.push(UserPart::text(format!(
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
                        parts.push(UserPart::text(format!(
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
                _ => parts.push(UserPart::text("[An unsupported resource was attached.]")),
            },
            _ => parts.push(UserPart::text(
                "[An unsupported content block was attached.]",
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
        assert_eq!(parts[0], UserPart::text("hi"));
        assert_eq!(
            parts[1],
            UserPart::text("[Referenced: b.rs](file:///a/b.rs)")
        );
        assert_eq!(
            parts[2],
            UserPart::text("<context ref=\"file:///a/c.rs\">\nfn c() {}\n</context>")
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
        assert!(
            matches!(&no_images[0], UserPart::Text { text } if text.contains("does not accept images"))
        );
        let input = to_user_input(
            blocks(
                serde_json::json!([{"type": "resource_link", "uri": "file:///a/b.rs", "name": "b.rs"}]),
            ),
            true,
        );
        assert_eq!(
            input.blocks,
            [InputBlock::ResourceLink {
                uri: "file:///a/b.rs".into(),
                name: "b.rs".into(),
                description: None,
                mime_type: None
            }]
        );
    }
}
