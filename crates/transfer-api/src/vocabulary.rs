//! The shape of a fixed vocabulary of words written into objects (a
//! condition's or an Event's `reason`): an enum whose variants are the
//! words, with the list of them all and the way back from a written word.
//! One macro makes each, so that the word, the variant and the list cannot
//! disagree.

/// `vocabulary! { /// doc \n pub enum Name { /// doc \n Word, ... } }`: the
/// enum, `Name::ALL`, `as_str` (the variant's name, as written), `parse` and
/// `Display`.
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$doc:meta])* $word:ident, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$doc])* $word, )*
        }

        impl $name {
            /// Every word, in the order they are declared.
            pub const ALL: &'static [$name] = &[ $( $name::$word, )* ];

            /// The word as it is written: the variant's name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$word => stringify!($word), )*
                }
            }

            /// The word `written` names, if this build knows it (a newer
            /// server may write one it does not).
            pub fn parse(written: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|w| w.as_str() == written)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use vocabulary;
