use super::*;

fn held(members: &[usize]) -> BTreeSet<usize> {
    members.iter().copied().collect()
}

#[test]
fn a_member_that_fails_its_probe_is_taken_out_of_the_balancer() {
    assert_eq!(
        changes(&held(&[0, 1, 2]), &[true, false, true]),
        [Change::Remove(1)]
    );
}

#[test]
fn a_member_that_answers_again_is_put_back() {
    assert_eq!(
        changes(&held(&[0, 2]), &[true, true, true]),
        [Change::Add(1)]
    );
}

#[test]
fn when_no_member_answers_the_balancer_keeps_what_it_has() {
    assert_eq!(changes(&held(&[1]), &[false, false, false]), []);
    assert_eq!(changes(&held(&[0, 1, 2]), &[false, false, false]), []);
}

#[test]
fn a_new_member_is_added_before_the_failed_one_is_removed_so_the_balancer_is_never_empty() {
    let steps = changes(&held(&[0]), &[false, true, false]);
    assert_eq!(steps, [Change::Add(1), Change::Remove(0)]);
    let mut members = held(&[0]);
    for step in steps {
        match step {
            Change::Add(i) => members.insert(i),
            Change::Remove(i) => members.remove(&i),
        };
        assert!(!members.is_empty(), "empty after {step:?}");
    }
    assert_eq!(members, held(&[1]));
}

#[test]
fn healthy_members_already_held_need_no_change() {
    assert_eq!(changes(&held(&[0, 1, 2]), &[true, true, true]), []);
}
