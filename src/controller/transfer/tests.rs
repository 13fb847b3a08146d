use super::*;

#[test]
fn the_steps_are_named_c1_then_r1_to_r6_in_protocol_order() {
    let names: Vec<&str> = Step::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["C1", "R1", "R2", "R3", "R4", "R5", "R6"]);
}
