//! What the benchmarks share, behind this crate's `bench` feature (it
//! brings hyper, tokio, plotters and the etcd client, which `make dev`
//! does not need): the HTTP/2 load generator ([`load`]), the null backend
//! that measures kube-apiserver's proxy alone ([`null_backend`]), the PNG
//! charts ([`plot`]), the transfer latencies and their baselines
//! ([`transfer`]), what a fleet of transfers wrote to etcd ([`writes`]),
//! and the blocks each benchmark writes into `benchmarks.md` ([`report`]).

#![allow(clippy::unwrap_used)] // A benchmark fails by panicking.

pub mod load;
pub mod null_backend;
pub mod plot;
pub mod report;
pub mod transfer;
pub mod writes;
