//! `words!`: an enum whose variants are words, with the word each one reads and stores as.

/// Declares an enum of words: `Serialize` / `Deserialize` as the word, `as_str`, `parse`
/// (exact), `ALL` in declaration order, `Display` and `FromStr`. Extra derives (ordering,
/// `Default`) go on the enum as usual.
macro_rules! words {
    // `loose` before the enum: `parse` also takes the word with surrounding spaces and in any
    // ASCII case (for words people type, like a contract level).
    (
        loose
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal ),+ $(,)?
        }
    ) => {
        words!(@enum [$(#[$meta])*] $name [$( [$(#[$vmeta])*] $variant $word )+] |s: &str| s.trim().to_ascii_lowercase());
    };
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $word:literal ),+ $(,)?
        }
    ) => {
        words!(@enum [$(#[$meta])*] $name [$( [$(#[$vmeta])*] $variant $word )+] |s: &str| s.to_string());
    };
    (@enum [$(#[$meta:meta])*] $name:ident [$( [$(#[$vmeta:meta])*] $variant:ident $word:literal )+] $norm:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $word)] $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; [$($word),+].len()] = [$($name::$variant),+];

            /// The word as stored and sent.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $word ),+
                }
            }

            /// The value for a word as `as_str` spells it.
            pub fn parse(s: &str) -> Option<Self> {
                let normalise = $norm;
                match normalise(s).as_str() {
                    $( $word => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        // Read and written as the text column that stores the word (engine only).
        #[cfg(feature = "sqlx")]
        impl sqlx::Type<sqlx::Postgres> for $name {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <str as sqlx::Type<sqlx::Postgres>>::type_info()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        #[cfg(feature = "sqlx")]
        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $name {
            fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let word = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
                Ok(word.parse::<Self>()?)
            }
        }

        #[cfg(feature = "sqlx")]
        impl sqlx::Encode<'_, sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode_by_ref(&self.as_str(), buf)
            }
        }

        // So a test (or a match on a row read as text) can compare with the word itself.
        impl PartialEq<&str> for $name {
            fn eq(&self, word: &&str) -> bool {
                self.as_str() == *word
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.as_str().to_string()
            }
        }

        impl std::str::FromStr for $name {
            type Err = crate::words::UnknownWord;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s).ok_or_else(|| crate::words::UnknownWord {
                    what: stringify!($name),
                    word: s.to_string(),
                    known: &[$($word),+],
                })
            }
        }
    };
}

/// A word that names no value of the enum; says which words would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownWord {
    pub what: &'static str,
    pub word: String,
    pub known: &'static [&'static str],
}

impl std::fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown {} {:?} (one of: {})", self.what, self.word, self.known.join(", "))
    }
}

impl std::error::Error for UnknownWord {}

#[cfg(test)]
mod tests {
    words! {
        #[allow(dead_code)]
        #[derive(PartialOrd, Ord, Default)]
        pub enum Size {
            Small = "small",
            #[default]
            Large = "large-ish",
        }
    }

    #[test]
    fn a_word_round_trips_through_serde_parse_and_display() {
        for s in Size::ALL {
            assert_eq!(Size::parse(s.as_str()), Some(s));
            assert_eq!(s.to_string().parse::<Size>(), Ok(s));
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(serde_json::from_str::<Size>(&json).unwrap(), s);
        }
        assert_eq!(Size::default(), Size::Large);
        assert!(Size::Small < Size::Large);
    }

    words! {
        loose
        #[allow(dead_code)]
        pub enum Loose {
            Gold = "gold",
        }
    }

    #[test]
    fn a_loose_word_is_read_in_any_case_and_spacing() {
        assert_eq!(Loose::parse(" Gold "), Some(Loose::Gold));
        assert_eq!(Size::parse(" small"), None);
    }

    #[test]
    fn an_unknown_word_is_refused_with_the_words_that_exist() {
        assert_eq!(Size::parse("Small"), None);
        let e = "huge".parse::<Size>().unwrap_err();
        assert_eq!(e.to_string(), "unknown Size \"huge\" (one of: small, large-ish)");
        assert!(serde_json::from_str::<Size>("\"huge\"").is_err());
    }
}
