pub fn double(x: u32) -> u32 {
    return x * 2;
}

pub fn compare(flag: bool) {
    assert_eq!(flag, true);
}

pub fn unused() {
    let unused = 3;
}

pub fn length(v: &Vec<u8>) -> usize {
    v.len()
}

pub fn spread(items: &[u32]) -> u32 {
    let mut total = 0;
    for i in 0..items.len() {
        total += items[i];
    }
    total
}

pub fn manual(x: Option<u32>) -> u32 {
    match x {
        Some(v) => v,
        None => 0,
    }
}

pub fn clones(s: &String) -> String {
    s.clone().clone()
}
