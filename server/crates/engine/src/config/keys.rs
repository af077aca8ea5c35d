//! The keys `config.toml` knows, read from the file schema's own serde field lists (so the
//! list cannot drift from the schema), and the closest known key to a mistyped one:
//! `modle` → `model`, `sandbox.netwrk` → `sandbox.network`.

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A deserializer that only records the field names a struct asks for.
struct FieldNames(&'static [&'static str]);

impl<'de> Deserializer<'de> for &mut FieldNames {
    type Error = de::value::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = fields;
        Err(de::Error::custom("field names read"))
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The field names of a struct that derives `Deserialize`.
pub(super) fn fields_of<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    let mut names = FieldNames(&[]);
    let _ = T::deserialize(&mut names);
    names.0
}

/// The known key closest to `key`, if it is close enough to be a typo of it.
pub(super) use talaria_util::closest;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Schema {
        model: Option<String>,
        max_turn_requests: Option<u32>,
        network: Option<bool>,
    }

    #[test]
    fn field_names_come_from_the_schema() {
        assert_eq!(
            fields_of::<Schema>(),
            ["model", "max_turn_requests", "network"]
        );
    }

    #[test]
    fn typos_find_their_key_and_strangers_do_not() {
        let known = fields_of::<Schema>();
        assert_eq!(closest("modle", known), Some("model"));
        assert_eq!(closest("Model", known), Some("model"));
        assert_eq!(
            closest("max_turn_request", known),
            Some("max_turn_requests")
        );
        assert_eq!(closest("netwrok", known), Some("network"));
        assert_eq!(closest("colour", known), None);
        assert_eq!(closest("model", known), None, "a known key is no typo");
    }
}
