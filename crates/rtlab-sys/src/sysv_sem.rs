//! A System V semaphore used as a lock (`semop` with `SEM_UNDO`): seed 003's comparison for
//! the robust mutex (the kernel undoes a dead holder's decrement, as a robust mutex hands the
//! lock on with EOWNERDEAD).

use crate::SysError;

/// A private System V semaphore set of one, initialised to 1 (unlocked); removed on drop, and
/// by its janitor if this process dies without dropping it (even by SIGKILL): a SysV set
/// outlives its creator, and nothing else would ever remove it.
#[derive(Debug)]
pub struct SysvSem {
    id: i32,
    janitor: Option<crate::process::Janitor>,
}

/// Holds the semaphore; releases it (`+1`, `SEM_UNDO`) on drop.
#[derive(Debug)]
pub struct SysvSemGuard<'a> {
    sem: &'a SysvSem,
}

impl SysvSem {
    /// C: `semget(IPC_PRIVATE, 1, IPC_CREAT | 0600)`, `semctl(id, 0, SETVAL, 1)`.
    pub fn new() -> Result<SysvSem, SysError> {
        // SAFETY: plain system calls on integers.
        let id = unsafe { libc::semget(libc::IPC_PRIVATE, 1, libc::IPC_CREAT | 0o600) };
        if id < 0 {
            return Err(SysError::from_io("semget", std::io::Error::last_os_error()));
        }
        let mut sem = SysvSem { id, janitor: None };
        // SAFETY: the janitor's cleanup is one semctl on an integer: no allocation, no lock.
        sem.janitor = Some(unsafe {
            crate::process::Janitor::start(move || {
                libc::semctl(id, 0, libc::IPC_RMID);
            })
        }?);
        // SAFETY: SETVAL takes an int as its fourth argument.
        if unsafe { libc::semctl(id, 0, libc::SETVAL, 1) } < 0 {
            return Err(SysError::from_io(
                "semctl(SETVAL)",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(sem)
    }

    fn op(&self, delta: i16) -> Result<(), SysError> {
        let mut op = libc::sembuf {
            sem_num: 0,
            sem_op: delta,
            sem_flg: libc::SEM_UNDO as i16,
        };
        loop {
            // SAFETY: one valid sembuf.
            if unsafe { libc::semop(self.id, &mut op, 1) } == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(SysError::from_io("semop", e));
            }
        }
    }

    /// Releases it (`semop(+1, SEM_UNDO)`) when held without a guard (its guard was given up
    /// with `mem::forget`); a semaphore has no owner, so any holder may.
    pub fn unlock_held(&self) -> Result<(), SysError> {
        self.op(1)
    }

    /// Takes it (`semop(-1, SEM_UNDO)`), waiting as long as it is held.
    pub fn lock(&self) -> Result<SysvSemGuard<'_>, SysError> {
        self.op(-1)?;
        Ok(SysvSemGuard { sem: self })
    }
}

impl Drop for SysvSemGuard<'_> {
    fn drop(&mut self) {
        let _ = self.sem.op(1);
    }
}

impl Drop for SysvSem {
    fn drop(&mut self) {
        // SAFETY: removes the set this value created.
        unsafe { libc::semctl(self.id, 0, libc::IPC_RMID) };
        if let Some(j) = self.janitor.take() {
            j.dismiss();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_and_is_removed() {
        let sem = std::sync::Arc::new(SysvSem::new().unwrap());
        let id = sem.id;
        let count = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (sem, count) = (sem.clone(), count.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let _g = sem.lock().unwrap();
                        // Not atomic as a whole: only the semaphore keeps it exact.
                        let v = count.load(std::sync::atomic::Ordering::Relaxed);
                        count.store(v + 1, std::sync::atomic::Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(count.load(std::sync::atomic::Ordering::Relaxed), 8000);
        drop(sem);
        // SAFETY: GETVAL on a removed id fails with EINVAL.
        let gone = unsafe { libc::semctl(id, 0, libc::GETVAL) } < 0;
        assert!(gone, "the set is removed");
    }

    #[test]
    fn a_set_whose_creator_dies_is_removed_by_its_janitor() {
        // Regression (hardening, second review, #4): SIGKILL of `lock --processes --impl
        // sysv-sem` left its three sets behind.
        // The creator is a forked child that makes a set, reports its id and is killed.
        let (mut read_end, mut write_end) = crate::process::pipe().unwrap();
        // SAFETY: the child makes the set (semget, fork, pipe: syscalls; the small
        // allocations happen in a child of a test process whose other threads hold no lock
        // we need), writes its id and sleeps until killed.
        let pid = unsafe {
            crate::process::fork_child(|| {
                let sem = SysvSem::new().unwrap();
                let _ = std::io::Write::write_all(&mut write_end, &sem.id.to_ne_bytes());
                std::mem::forget(sem);
                loop {
                    libc::pause(); // until the SIGKILL
                }
            })
        }
        .unwrap();
        let mut id = [0u8; 4];
        std::io::Read::read_exact(&mut read_end, &mut id).unwrap();
        let id = i32::from_ne_bytes(id);
        // SAFETY: GETVAL of a live set.
        assert!(unsafe { libc::semctl(id, 0, libc::GETVAL) } >= 0, "made");
        crate::process::kill_hard(pid).unwrap();
        crate::process::wait_child(pid).unwrap();
        let t = std::time::Instant::now();
        // SAFETY: GETVAL on a removed id fails with EINVAL.
        while unsafe { libc::semctl(id, 0, libc::GETVAL) } >= 0 {
            assert!(t.elapsed().as_secs() < 5, "the set outlived its creator");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
