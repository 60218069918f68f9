//! [`NcclExchange`] (feature `cuda`): the expert-parallel all-to-all between GPUs through NCCL
//! (cudarc's `nccl` feature, libnccl loaded at run time): one communicator per rank, the
//! all-to-all as grouped `ncclSend`/`ncclRecv` pairs with every peer on the device's stream.
//! [`NcclExchange::all_to_all_device`] moves device buffers (the device path of a rank);
//! the [`Exchange`] implementation stages host buffers through it (counts first, then the rows)
//! so the expert-parallel layer runs over NCCL unchanged.
//!
//! Compiled in CI, never run there (no GPU): untested on hardware.

use super::device::CudaDevice;
use super::gpu::{DeviceBuffer, Elem, Gpu};
use crate::tensor::device::DeviceError;
use crate::tensor::expert_parallel::{EpError, Exchange};
use cudarc::nccl::{result as nccl, sys};
use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::sync::Arc;

/// The group's unique id: created once ([`NcclExchange::unique_id`]) and given to every rank.
pub use cudarc::nccl::Id as NcclId;

fn nccl_err(what: &str, e: nccl::NcclError) -> EpError {
    EpError::Exchange(format!("NCCL {what}: {:?}", e.0))
}

/// One rank's NCCL communicator on its GPU.
pub struct NcclExchange {
    comm: sys::ncclComm_t,
    dev: Arc<CudaDevice>,
    gpu: Gpu,
    rank: usize,
    size: usize,
}

// SAFETY: a communicator may be used from any thread as long as its calls are not concurrent;
// every call goes through `&mut self` or `&self` of a value that is not `Sync`.
unsafe impl Send for NcclExchange {}

impl NcclExchange {
    /// Load libnccl (a typed error when missing) and create a new group id.
    pub fn unique_id() -> Result<NcclId, EpError> {
        super::device::preload("nccl", "EXECCRITIC_NCCL")?;
        NcclId::new().map_err(|e| nccl_err("get unique id", e))
    }

    /// Join the group of `id` as rank `rank` of `size` on `dev` (every rank calls this, each
    /// from its own thread or process; the call returns when all have joined).
    pub fn new(dev: Arc<CudaDevice>, rank: usize, size: usize, id: NcclId) -> Result<NcclExchange, EpError> {
        super::device::preload("nccl", "EXECCRITIC_NCCL")?;
        if rank >= size {
            return Err(EpError::Shape { rank, msg: format!("rank of a group of {size}") });
        }
        dev.ctx.bind_to_thread().map_err(|e| DeviceError::Driver(e.to_string()))?;
        let mut comm = MaybeUninit::uninit();
        let uid = sys::ncclUniqueId { internal: *id.internal() };
        // SAFETY: `comm` is written by ncclCommInitRank before it is read.
        let comm = unsafe {
            nccl::comm_init_rank(comm.as_mut_ptr(), size as i32, uid, rank as i32).map_err(|e| nccl_err("init rank", e))?;
            comm.assume_init()
        };
        let gpu = Gpu::from_device(dev.clone());
        Ok(NcclExchange { comm, dev, gpu, rank, size })
    }

    /// Device all-to-all: `send_counts[p]` elements of `send` (consecutive, peer by peer) go to
    /// rank `p`; `recv_counts[p]` elements from rank `p` land in `recv`, peer by peer. Enqueued
    /// on the device's stream as one NCCL group.
    pub fn all_to_all_device<T: Elem>(
        &self,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
        recv: &mut DeviceBuffer<T>,
        recv_counts: &[usize],
    ) -> Result<(), EpError> {
        let (n, sz) = (self.size, std::mem::size_of::<T>());
        let fits = |c: &[usize], len: usize| c.len() == n && c.iter().sum::<usize>() <= len;
        if !fits(send_counts, send.len()) || !fits(recv_counts, recv.len()) {
            return Err(EpError::Shape { rank: self.rank, msg: "all-to-all counts do not fit the buffers".into() });
        }
        let stream = self.dev.stream.cu_stream() as sys::cudaStream_t;
        nccl::group_start().map_err(|e| nccl_err("group start", e))?;
        let enqueue = || -> Result<(), EpError> {
            let (mut s_off, mut r_off) = (0, 0);
            for peer in 0..n {
                let (sc, rc) = (send_counts[peer], recv_counts[peer]);
                // SAFETY: the ranges [off, off + count) lie inside the buffers (checked above),
                // which outlive the stream work (the caller synchronises before reusing them).
                unsafe {
                    if sc > 0 {
                        let p = send.ptr_at(s_off) as *const c_void;
                        nccl::send(p, sc * sz, sys::ncclDataType_t::ncclUint8, peer as i32, self.comm, stream).map_err(|e| nccl_err("send", e))?;
                    }
                    if rc > 0 {
                        let p = recv.ptr_at(r_off) as *mut c_void;
                        nccl::recv(p, rc * sz, sys::ncclDataType_t::ncclUint8, peer as i32, self.comm, stream).map_err(|e| nccl_err("recv", e))?;
                    }
                }
                s_off += sc;
                r_off += rc;
            }
            Ok(())
        };
        let queued = enqueue();
        let ended = nccl::group_end().map_err(|e| nccl_err("group end", e));
        queued.and(ended.map(|_| ()))
    }
}

impl Exchange for NcclExchange {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_to_all<T: Elem>(&mut self, send: Vec<Vec<T>>) -> Result<Vec<Vec<T>>, EpError> {
        let n = self.size;
        if send.len() != n {
            return Err(EpError::Shape { rank: self.rank, msg: format!("{} send buffers for {n} ranks", send.len()) });
        }
        let ones = vec![1usize; n];
        let counts: Vec<u64> = send.iter().map(|v| v.len() as u64).collect();
        let mut got = self.gpu.zeros::<u64>(n)?;
        self.all_to_all_device(&self.gpu.upload(&counts)?, &ones, &mut got, &ones)?;
        let recv_counts: Vec<usize> = self.gpu.download(&got)?.into_iter().map(|c| c as usize).collect();
        let send_counts: Vec<usize> = send.iter().map(Vec::len).collect();
        let sbuf = self.gpu.upload(&send.concat())?;
        let mut rbuf = self.gpu.zeros::<T>(recv_counts.iter().sum())?;
        self.all_to_all_device(&sbuf, &send_counts, &mut rbuf, &recv_counts)?;
        let flat = self.gpu.download(&rbuf)?;
        let mut out = Vec::with_capacity(n);
        let mut at = 0;
        for c in recv_counts {
            out.push(flat[at..at + c].to_vec());
            at += c;
        }
        Ok(out)
    }
}

impl Drop for NcclExchange {
    fn drop(&mut self) {
        // SAFETY: the communicator was created by `new` and is destroyed once; an error here
        // has nowhere to go.
        let _ = unsafe { nccl::comm_destroy(self.comm) };
    }
}
