//! The rules after the prologue, as a balanced search over syscall numbers.
//!
//! The kernel runs the filter for every syscall it cannot answer from its
//! per-filter cache, and fills that cache when the filter is installed by
//! emulating the program for every syscall number of the architecture. A
//! chain of one comparison per denied syscall (what seccompiler emits) costs
//! a pass over the whole chain for each allowed number: about 0.25 ms of each
//! install here, twice a run (pid 1, a joined command). A search decides each
//! number after about log2(rules) comparisons.
//!
//! Classic BPF only jumps forward, by at most 255 instructions: each node is
//! one `JGE` whose true branch jumps over its left half, which the tests keep
//! well below that bound for the table.

use seccompiler::sock_filter;

use super::bpf::{
    AND_K, DATA_ARG0_LOW, JEQ_K, JGE_K, JSET_K, LD_W_ABS, RET_ALLOW, RET_ERRNO, RET_K, arg_low,
    jump, stmt,
};
use super::file_modes::{BLOCK_DEVICE, CHAR_DEVICE, CREATES, FILE_TYPE, ModeCheck, SET_ID};

/// `CLONE_NEWUSER` (the same on every architecture; in the low 32 bits).
const CLONE_NEWUSER: u32 = 0x1000_0000;
/// `EPERM`.
const EPERM: u32 = 1;
/// `ENOSYS`.
const ENOSYS: u32 = 38;

/// What the filter answers for one denied syscall number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// `EPERM`.
    Eperm,
    /// `EPERM` when the first argument has `CLONE_NEWUSER` set, else allowed.
    EpermWithCloneNewuser,
    /// What a file mode's row checks (see `file_modes.rs`).
    Mode(ModeCheck),
}

/// A jump offset that does not fit the 8 bits classic BPF has for it (a
/// table of several hundred rows).
#[derive(Debug, thiserror::Error)]
#[error("a jump over {0} instructions does not fit classic BPF's 255")]
pub struct JumpTooFar(usize);

/// The program for `rules` (sorted by number, without duplicates), entered
/// with the syscall number loaded: a denied number gets its rule's answer,
/// every other number is allowed.
pub(crate) fn dispatch(rules: &[(u32, Rule)]) -> Result<Vec<sock_filter>, JumpTooFar> {
    debug_assert!(
        rules.windows(2).all(|pair| pair[0].0 < pair[1].0),
        "rules sorted, without duplicates"
    );
    let mut program = Vec::new();
    node(rules, &mut program)?;
    Ok(program)
}

/// Appends the search over `rules` to `program`.
fn node(rules: &[(u32, Rule)], program: &mut Vec<sock_filter>) -> Result<(), JumpTooFar> {
    match rules {
        [] => program.push(stmt(RET_K, RET_ALLOW)),
        [(nr, rule)] => {
            let answer = leaf(*rule);
            program.push(jump(JEQ_K, *nr, 0, offset(answer.len())?));
            program.extend(answer);
            program.push(stmt(RET_K, RET_ALLOW));
        }
        _ => {
            let (left, right) = rules.split_at(rules.len() / 2);
            let mut below = Vec::new();
            node(left, &mut below)?;
            program.push(jump(JGE_K, right[0].0, offset(below.len())?, 0));
            program.extend(below);
            node(right, program)?;
        }
    }
    Ok(())
}

/// The answer for one denied number (it overwrites the loaded number, and
/// every path through it returns).
fn leaf(rule: Rule) -> Vec<sock_filter> {
    let eperm = RET_ERRNO | EPERM;
    match rule {
        Rule::Eperm => vec![stmt(RET_K, eperm)],
        Rule::EpermWithCloneNewuser => vec![
            stmt(LD_W_ABS, DATA_ARG0_LOW),
            jump(JSET_K, CLONE_NEWUSER, 0, 1),
            stmt(RET_K, eperm),
            stmt(RET_K, RET_ALLOW),
        ],
        Rule::Mode(check) => mode_leaf(check, eperm),
    }
}

/// The answer for a file mode's row (every path returns).
fn mode_leaf(check: ModeCheck, eperm: u32) -> Vec<sock_filter> {
    match check {
        ModeCheck::SetId { mode } => vec![
            stmt(LD_W_ABS, arg_low(mode)),
            jump(JSET_K, SET_ID, 0, 1),
            stmt(RET_K, eperm),
            stmt(RET_K, RET_ALLOW),
        ],
        ModeCheck::CreatingSetId { flags, mode } => vec![
            stmt(LD_W_ABS, arg_low(flags)),
            // Not creating: the mode argument is not used (and may be anything).
            jump(JSET_K, CREATES, 0, 3),
            stmt(LD_W_ABS, arg_low(mode)),
            jump(JSET_K, SET_ID, 0, 1),
            stmt(RET_K, eperm),
            stmt(RET_K, RET_ALLOW),
        ],
        ModeCheck::SetIdOrDevice { mode } => vec![
            stmt(LD_W_ABS, arg_low(mode)),
            jump(JSET_K, SET_ID, 4, 0),
            stmt(AND_K, FILE_TYPE),
            jump(JEQ_K, CHAR_DEVICE, 2, 0),
            jump(JEQ_K, BLOCK_DEVICE, 1, 0),
            stmt(RET_K, RET_ALLOW),
            stmt(RET_K, eperm),
        ],
        ModeCheck::Unreadable => vec![stmt(RET_K, RET_ERRNO | ENOSYS)],
    }
}

fn offset(instructions: usize) -> Result<u8, JumpTooFar> {
    u8::try_from(instructions).map_err(|_| JumpTooFar(instructions))
}
