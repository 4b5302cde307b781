pub fn checked(x: bool) {
    assert_eq!(x, true);
}

pub fn length(v: &Vec<u8>) -> usize {
    let unused = 3;
    return v.len();
}
