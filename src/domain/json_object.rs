//! Optional structs in request bodies that must come as JSON objects. serde's
//! derive also reads a struct from an array, by position, so `[]` would pass
//! as a struct of defaults; these read only a map (or `null`, or nothing) and
//! hand it to the struct's own derive, so its errors keep their field paths.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::marker::PhantomData;

struct ObjectOnly<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOnly<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
    }
}

/// An optional struct field (`#[serde(default, deserialize_with = "object_only")]`):
/// absent or `null` is `None`; an object is read by `T`'s derive; anything else is refused.
pub fn object_only<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    d.deserialize_option(ObjectOnly(PhantomData))
}

/// A struct field where `null` means "clear it" (`Some(None)`) and absence
/// means "leave it" (`None`), read only from an object.
pub fn present_object<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    object_only(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default)]
    struct Policy {
        max: u32,
    }

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(default, deserialize_with = "object_only")]
        policy: Option<Policy>,
        #[serde(default, deserialize_with = "present_object")]
        cleared: Option<Option<Policy>>,
    }

    #[test]
    fn only_an_object_or_null_reads_as_a_struct() {
        let body: Body =
            serde_json::from_str(r#"{"policy": {"max": 2}, "cleared": null}"#).unwrap();
        assert_eq!(body.policy, Some(Policy { max: 2 }));
        assert_eq!(body.cleared, Some(None));
        let body: Body = serde_json::from_str("{}").unwrap();
        assert_eq!((body.policy, body.cleared), (None, None));
        assert!(serde_json::from_str::<Body>(r#"{"policy": []}"#).is_err());
        assert!(serde_json::from_str::<Body>(r#"{"cleared": [1]}"#).is_err());
        assert!(serde_json::from_str::<Body>(r#"{"policy": 3}"#).is_err());
    }
}
