use super::*;

#[test]
fn hash_is_upper_case_hex_sha512_like_kube() {
    // sha512("") from any reference implementation.
    assert_eq!(
        content_hash(b""),
        "CF83E1357EEFB8BDF1542850D66D8007D620E4050B5715DC83F4A921D36CE9CE\
         47D0D13C5D85F2B0FF8318D2877EEC2F63B931BD47417A81A538327AF927DA3E"
    );
}

#[test]
fn etag_is_the_quoted_hash() {
    let doc = Document::new(b"{}".to_vec(), "application/json");
    assert_eq!(doc.etag(), format!("\"{}\"", doc.hash()));
    assert_eq!(doc.hash().len(), 128);
}

#[test]
fn if_none_match_with_the_etag_or_a_wildcard_means_current() {
    let doc = Document::new(b"{}".to_vec(), "application/json");
    let weak = format!("W/{}", doc.etag());
    let listed = format!("\"other\", {}", doc.etag());
    for header in [doc.etag(), weak.as_str(), listed.as_str(), "*"] {
        assert!(doc.is_current_for(Some(header)), "{header}");
    }
}

#[test]
fn if_none_match_with_another_tag_or_the_bare_hash_is_not_current() {
    let doc = Document::new(b"{}".to_vec(), "application/json");
    for header in [Some("\"other\""), Some(doc.hash()), Some(""), None] {
        assert!(!doc.is_current_for(header), "{header:?}");
    }
}
