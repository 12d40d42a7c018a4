//! backend-container
#![deny(missing_docs)]
