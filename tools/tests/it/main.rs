//! The demo against the real PostgreSQL and RabbitMQ on this machine.

#[macro_use]
extern crate testkit;

mod demo;
