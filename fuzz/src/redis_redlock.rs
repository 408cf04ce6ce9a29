//! `redis_redlock`: `redis::combine_redlock` over any number of masters, each down, empty or
//! holding one of a few tokens (so they agree often) or any text.
//!
//! Checks: the masters come back unchanged; a majority holder holds on more than N/2 masters, and
//! a holder on more than N/2 masters is the majority holder; `split` is "more than one distinct
//! holder"; the minority holders are the other distinct holders, once each, in first-seen order.

use arbitrary::Arbitrary;
use lockscope_model::redis::{combine_redlock, RedlockMaster};

use crate::Text;

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Input {
    pub masters: Vec<Master>,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Master {
    pub name: Token,
    pub holder: Option<(Token, Option<i64>)>,
}

/// `t0`…`t3` (so masters agree), or any text.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Token {
    Few(u8),
    Raw(Text),
}

impl Token {
    pub fn text(&self) -> String {
        match self {
            Token::Few(i) => format!("t{}", i % 4),
            Token::Raw(Text(t)) => t.clone(),
        }
    }
}

pub fn run(data: &[u8]) {
    if let Some(input) = crate::input::<Input>(data) {
        crate::show(&input);
        check(&input);
    }
}

pub fn check(input: &Input) {
    let masters: Vec<RedlockMaster> = input
        .masters
        .iter()
        .map(|m| RedlockMaster {
            master: m.name.text(),
            holder: m.holder.as_ref().map(|(h, ttl)| (h.text(), *ttl)),
        })
        .collect();
    let n = masters.len();
    let merged = combine_redlock(masters.clone());
    assert_eq!(merged.masters, masters, "masters changed");

    let mut distinct: Vec<(&str, usize)> = Vec::new();
    for m in &masters {
        if let Some((h, _)) = &m.holder {
            match distinct.iter_mut().find(|(d, _)| d == h) {
                Some((_, count)) => *count += 1,
                None => distinct.push((h, 1)),
            }
        }
    }
    let majority: Vec<&str> = distinct
        .iter()
        .filter(|(_, count)| *count > n / 2)
        .map(|(h, _)| *h)
        .collect();
    assert!(majority.len() <= 1, "two holders with a majority each");
    assert_eq!(merged.majority_holder.as_deref(), majority.first().copied());
    if let Some(h) = &merged.majority_holder {
        let count = masters
            .iter()
            .filter(|m| m.holder.as_ref().is_some_and(|(x, _)| x == h))
            .count();
        assert!(
            count > n / 2,
            "majority holder {h:?} on {count} of {n} masters"
        );
    }
    assert_eq!(
        merged.split,
        distinct.len() > 1,
        "split disagrees with the holders"
    );
    let minority: Vec<&str> = distinct
        .iter()
        .map(|(h, _)| *h)
        .filter(|h| Some(*h) != merged.majority_holder.as_deref())
        .collect();
    assert_eq!(
        merged
            .minority_holders
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        minority
    );
}
