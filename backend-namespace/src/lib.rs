//! backend-namespace
#![deny(missing_docs)]
