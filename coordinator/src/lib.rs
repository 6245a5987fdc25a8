//! Crest coordinator.
