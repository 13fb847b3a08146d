use super::*;

fn grpc(code: tonic::Code, message: &str) -> etcd_client::Error {
    etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
}

#[test]
fn a_connection_lost_in_the_middle_of_a_call_is_unavailable_not_internal() {
    for code in [tonic::Code::Unknown, tonic::Code::Cancelled] {
        assert!(
            matches!(map_err(grpc(code, "transport error")), StorageError::Unavailable(m) if m == "transport error"),
            "{code:?}"
        );
    }
}

#[test]
fn a_leader_change_and_a_timeout_are_unavailable() {
    for (code, message) in [
        (tonic::Code::Unavailable, "etcdserver: leader changed"),
        (tonic::Code::Unavailable, "etcdserver: request timed out"),
        (tonic::Code::DeadlineExceeded, "deadline exceeded"),
    ] {
        assert!(
            matches!(map_err(grpc(code, message)), StorageError::Unavailable(_)),
            "{code:?} {message}"
        );
    }
}

#[test]
fn a_request_etcd_refuses_as_malformed_stays_internal() {
    assert!(matches!(
        map_err(grpc(
            tonic::Code::InvalidArgument,
            "etcdserver: key is not provided"
        )),
        StorageError::Internal(_)
    ));
}
