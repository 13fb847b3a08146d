//! `kubectl transfer`: see the `kubectl_transfer` library.

fn main() {
    std::process::exit(kubectl_transfer::main());
}
