//! `kubectl transfer`: see `storage_transfer_apiserver::plugin`.

fn main() {
    std::process::exit(storage_transfer_apiserver::plugin::main());
}
