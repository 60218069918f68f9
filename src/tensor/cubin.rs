//! What a compiled kernel costs on the GPU, read from the CUBIN NVRTC produced (no GPU, no
//! toolkit): an ELF64 reader for the sections the CUDA driver reads at load time, and a parser of
//! ptxas's own report (`-Xptxas=-v` in the NVRTC log), which is the only place spills appear.
//!
//! Per entry function (an `ENTRY` symbol with its `.nv.info.<name>` section):
//! - registers per thread: `EIATTR_REGCOUNT` (0x2f) in the global `.nv.info`, keyed by the
//!   function's symbol index;
//! - local (stack) frame: `EIATTR_FRAME_SIZE` (0x11) and `EIATTR_MIN_STACK_SIZE` (0x12) there;
//! - static shared memory: the size of the NOBITS section `.nv.shared.<name>`, which on sm_80+
//!   includes the 1 KiB per block the system reserves ([`RESERVED_SHARED_BYTES`]) when the module
//!   declares the reserved region (symbol `.nv.reservedSmem.offset0`); that part is reported
//!   separately, as it does not count towards the 48 KiB (or 227 KiB opt-in) a block may use;
//! - launch bounds: `EIATTR_MAX_THREADS` (0x05, x·y·z) in `.nv.info.<name>`; barriers
//!   `EIATTR_NUM_BARRIERS` (0x4c); register cap `EIATTR_MAXREG_COUNT` (0x1b); parameter bytes
//!   `EIATTR_CBANK_PARAM_SIZE` (0x19).
//!
//! An `.nv.info` section is a list of attributes `[format u8][attribute u8]` followed by, for
//! format 0x04 (`EIFMT_SVAL`), a `u16` length and that many bytes, else (`EIFMT_NVAL` 0x01,
//! `EIFMT_BVAL` 0x02, `EIFMT_HVAL` 0x03) a 2-byte value. The attribute codes were identified by
//! dumping the raw sections of NVRTC 13.0 and 13.5 sm_90 CUBINs next to `cuobjdump -elf`'s
//! decoded listing of the same files (cuobjdump 13.5 from the `nvidia-cuda-cuobjdump` wheel), and
//! the values read here agree with `cuobjdump --dump-resource-usage` on every kernel of
//! `kernels/*.cu` (REG = registers, STACK = the frame, SHARED = static shared + the 1 KiB sm_90
//! reserves per block, which is not part of the 48 KiB a launch may use). `tests/cuda_nvrtc.rs`
//! checks the reader against ptxas's report of the same compile on every CI run.

use std::collections::HashMap;

/// The resources of one entry function of a CUBIN.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelResources {
    pub name: String,
    /// Registers per thread (`EIATTR_REGCOUNT`).
    pub registers: u32,
    /// Bytes of local memory per thread for the function's own frame (`EIATTR_FRAME_SIZE`).
    pub frame_bytes: u32,
    /// Bytes of stack per thread including callees (`EIATTR_MIN_STACK_SIZE`).
    pub stack_bytes: u32,
    /// Static `__shared__` bytes per block the kernel declares (`.nv.shared.<name>` less the
    /// system's reserved part).
    pub static_shared_bytes: u32,
    /// The system-reserved shared memory included in the section (1 KiB on sm_80+, or 0).
    pub reserved_shared_bytes: u32,
    /// `__launch_bounds__` threads per block (`EIATTR_MAX_THREADS`), if declared.
    pub max_threads: Option<u32>,
    /// Register cap ptxas compiled under (`EIATTR_MAXREG_COUNT`; 255 when unbounded).
    pub max_registers: Option<u32>,
    /// Named barriers used (`EIATTR_NUM_BARRIERS`).
    pub barriers: u32,
    /// Bytes of kernel parameters (`EIATTR_CBANK_PARAM_SIZE`).
    pub param_bytes: u32,
}

impl KernelResources {
    /// Local memory per thread: the larger of the frame and the stack with callees.
    pub fn local_bytes(&self) -> u32 {
        self.frame_bytes.max(self.stack_bytes)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CubinError {
    #[error("not an ELF64 little-endian CUBIN")]
    NotElf,
    #[error("malformed CUBIN: {0}")]
    Malformed(String),
}

/// Shared memory per block the system reserves on sm_80 and later
/// (`CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK`).
pub const RESERVED_SHARED_BYTES: u32 = 1024;
/// The symbol a module defines when its kernels' shared sections include the reserved part.
const RESERVED_SMEM_SYMBOL: &str = ".nv.reservedSmem.offset0";

const SHT_SYMTAB: u32 = 2;
const SHT_NOBITS: u32 = 8;
const STT_FUNC: u8 = 2;
/// `st_other` bit of CUDA entry functions (`ENTRY` in cuobjdump's symbol listing).
const STO_CUDA_ENTRY: u8 = 0x10;

const EIFMT_SVAL: u8 = 0x04;
const EIATTR_MAX_THREADS: u8 = 0x05;
const EIATTR_FRAME_SIZE: u8 = 0x11;
const EIATTR_MIN_STACK_SIZE: u8 = 0x12;
const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;
const EIATTR_MAXREG_COUNT: u8 = 0x1b;
const EIATTR_REGCOUNT: u8 = 0x2f;
const EIATTR_NUM_BARRIERS: u8 = 0x4c;

struct Section {
    name: String,
    kind: u32,
    offset: usize,
    size: usize,
}

fn bad(msg: impl Into<String>) -> CubinError {
    CubinError::Malformed(msg.into())
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, CubinError> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| bad(format!("read of 2 bytes at {at} past the end")))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, CubinError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| bad(format!("read of 4 bytes at {at} past the end")))
}

fn u64_at(b: &[u8], at: usize) -> Result<usize, CubinError> {
    let v = b
        .get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        .ok_or_else(|| bad(format!("read of 8 bytes at {at} past the end")))?;
    usize::try_from(v).map_err(|_| bad("offset does not fit"))
}

fn c_str(b: &[u8], at: usize) -> Result<String, CubinError> {
    let tail = b.get(at..).ok_or_else(|| bad("string offset past the end"))?;
    let end = tail
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| bad("unterminated string"))?;
    Ok(String::from_utf8_lossy(&tail[..end]).into_owned())
}

fn sections(b: &[u8]) -> Result<Vec<Section>, CubinError> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return Err(CubinError::NotElf);
    }
    let shoff = u64_at(b, 0x28)?;
    let shentsize = u16_at(b, 0x3a)? as usize;
    let shnum = u16_at(b, 0x3c)? as usize;
    let shstrndx = u16_at(b, 0x3e)? as usize;
    if shentsize < 64 || shstrndx >= shnum || shoff.checked_add(shnum * shentsize).is_none_or(|e| e > b.len()) {
        return Err(bad("section header table"));
    }
    let raw: Vec<(u32, u32, usize, usize)> = (0..shnum)
        .map(|i| {
            let h = shoff + i * shentsize;
            Ok((u32_at(b, h)?, u32_at(b, h + 4)?, u64_at(b, h + 24)?, u64_at(b, h + 32)?))
        })
        .collect::<Result<_, CubinError>>()?;
    let strtab = raw[shstrndx].2;
    raw.into_iter()
        .map(|(name, kind, offset, size)| {
            if kind != SHT_NOBITS && offset.checked_add(size).is_none_or(|e| e > b.len()) {
                return Err(bad("section past the end of the file"));
            }
            Ok(Section { name: c_str(b, strtab + name as usize)?, kind, offset, size })
        })
        .collect()
}

/// One attribute of an `.nv.info` section: (attribute, value bytes).
fn attributes(b: &[u8], s: &Section) -> Result<Vec<(u8, Vec<u8>)>, CubinError> {
    let (mut p, end) = (s.offset, s.offset + s.size);
    let mut out = vec![];
    while p + 4 <= end {
        let (fmt, attr) = (b[p], b[p + 1]);
        if fmt == EIFMT_SVAL {
            let len = u16_at(b, p + 2)? as usize;
            let v = b.get(p + 4..p + 4 + len).filter(|_| p + 4 + len <= end);
            out.push((attr, v.ok_or_else(|| bad(format!("{}: attribute past the section", s.name)))?.to_vec()));
            p += 4 + len;
        } else {
            out.push((attr, b[p + 2..p + 4].to_vec()));
            p += 4;
        }
    }
    Ok(out)
}

/// Every entry function of `cubin` with its resources, in symbol-table order.
pub fn read(cubin: &[u8]) -> Result<Vec<KernelResources>, CubinError> {
    let secs = sections(cubin)?;
    let symtab = secs
        .iter()
        .find(|s| s.kind == SHT_SYMTAB)
        .ok_or_else(|| bad("no symbol table"))?;
    let strtab = secs
        .iter()
        .find(|s| s.name == ".strtab")
        .ok_or_else(|| bad("no .strtab"))?;
    let mut kernels: Vec<(u32, KernelResources)> = vec![];
    let mut reserved = false;
    for i in 0..symtab.size / 24 {
        let e = symtab.offset + i * 24;
        let (info, other) = (cubin[e + 4], cubin[e + 5]);
        let name = c_str(cubin, strtab.offset + u32_at(cubin, e)? as usize)?;
        reserved |= name == RESERVED_SMEM_SYMBOL;
        if info & 0xf == STT_FUNC && other & STO_CUDA_ENTRY != 0 {
            kernels.push((i as u32, KernelResources { name, ..Default::default() }));
        }
    }
    let by_sym: HashMap<u32, usize> = kernels.iter().enumerate().map(|(k, (s, _))| (*s, k)).collect();
    // per-function values of the global .nv.info: [symbol u32][value u32]
    for s in secs.iter().filter(|s| s.name == ".nv.info") {
        for (attr, v) in attributes(cubin, s)? {
            if v.len() != 8 || ![EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE].contains(&attr) {
                continue;
            }
            let (sym, val) = (u32_at(&v, 0)?, u32_at(&v, 4)?);
            let Some(&k) = by_sym.get(&sym) else { continue };
            let r = &mut kernels[k].1;
            match attr {
                EIATTR_REGCOUNT => r.registers = val,
                EIATTR_FRAME_SIZE => r.frame_bytes = val,
                _ => r.stack_bytes = val,
            }
        }
    }
    for (_, r) in kernels.iter_mut() {
        if let Some(s) = secs.iter().find(|s| s.name == format!(".nv.shared.{}", r.name)) {
            let size = u32::try_from(s.size).map_err(|_| bad("shared size"))?;
            r.reserved_shared_bytes = if reserved { size.min(RESERVED_SHARED_BYTES) } else { 0 };
            r.static_shared_bytes = size - r.reserved_shared_bytes;
        }
        let info = secs
            .iter()
            .find(|s| s.name == format!(".nv.info.{}", r.name))
            .ok_or_else(|| bad(format!("entry {} has no .nv.info section", r.name)))?;
        for (attr, v) in attributes(cubin, info)? {
            let half = || u16::from_le_bytes([v[0], v[1]]) as u32;
            match attr {
                EIATTR_MAX_THREADS if v.len() == 12 => {
                    r.max_threads = Some(u32_at(&v, 0)? * u32_at(&v, 4)? * u32_at(&v, 8)?)
                }
                EIATTR_MAXREG_COUNT => r.max_registers = Some(half()),
                EIATTR_NUM_BARRIERS => r.barriers = v[0] as u32,
                EIATTR_CBANK_PARAM_SIZE => r.param_bytes = half(),
                _ => {}
            }
        }
    }
    Ok(kernels.into_iter().map(|(_, r)| r).collect())
}

/// What ptxas reports about one entry function with `-v` (NVRTC: `-Xptxas=-v`, in the program
/// log): the independent account [`read`] is checked against, and the only source of spills.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtxasReport {
    pub name: String,
    pub registers: u32,
    pub frame_bytes: u32,
    pub spill_store_bytes: u32,
    pub spill_load_bytes: u32,
    pub shared_bytes: u32,
}

/// Parse ptxas's `-v` lines: `Compiling entry function 'NAME' for 'sm_90'`, then
/// `Function properties for NAME` / `N bytes stack frame, N bytes spill stores, N bytes spill
/// loads` / `Used N registers, …, N bytes smem`. Non-entry functions are skipped.
pub fn parse_ptxas_log(log: &str) -> Vec<PtxasReport> {
    let mut out: Vec<PtxasReport> = vec![];
    let mut current: Option<PtxasReport> = None;
    let mut in_entry_props = false;
    let number_before = |line: &str, what: &str| -> Option<u32> {
        let i = line.find(what)?;
        line[..i].split(|c: char| !c.is_ascii_digit()).rfind(|s| !s.is_empty())?.parse().ok()
    };
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            out.extend(current.take());
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            current = Some(PtxasReport { name, ..Default::default() });
            in_entry_props = false;
        } else if let Some(rest) = line.split("Function properties for ").nth(1) {
            in_entry_props = current.as_ref().is_some_and(|c| c.name == rest.trim());
        } else if let Some(r) = current.as_mut() {
            if in_entry_props && line.contains("bytes stack frame") {
                r.frame_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
                r.spill_store_bytes = number_before(line, "bytes spill stores").unwrap_or(0);
                r.spill_load_bytes = number_before(line, "bytes spill loads").unwrap_or(0);
                in_entry_props = false;
            } else if line.contains("Used ") && line.contains(" registers") {
                r.registers = number_before(line, " registers").unwrap_or(0);
                r.shared_bytes = number_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    out.extend(current);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal CUBIN-shaped ELF: one entry `k` (symbol 1) with the given attributes.
    fn elf(regs: u32, frame: u32, shared: usize, max_threads: Option<u32>) -> Vec<u8> {
        elf_with(regs, frame, shared, max_threads, false)
    }

    /// `reserved`: the module declares the system-reserved shared memory (its symbol).
    fn elf_with(regs: u32, frame: u32, shared: usize, max_threads: Option<u32>, reserved: bool) -> Vec<u8> {
        let names = ["", ".shstrtab", ".strtab", ".symtab", ".nv.info", ".nv.info.k", ".nv.shared.k"];
        let mut shstr = vec![];
        let mut offs = vec![];
        for n in names {
            offs.push(shstr.len() as u32);
            shstr.extend_from_slice(n.as_bytes());
            shstr.push(0);
        }
        let strtab = b"\0k\0.nv.reservedSmem.offset0\0".to_vec();
        let mut sym = vec![0u8; 24]; // null symbol
        let mut k = vec![0u8; 24];
        k[0..4].copy_from_slice(&1u32.to_le_bytes());
        k[4] = STT_FUNC | (1 << 4);
        k[5] = STO_CUDA_ENTRY;
        sym.extend(k);
        if reserved {
            let mut r = vec![0u8; 24];
            r[0..4].copy_from_slice(&3u32.to_le_bytes());
            r[4] = 1; // OBJECT
            sym.extend(r);
        }
        let sval = |attr: u8, v: &[u32]| {
            let mut e = vec![EIFMT_SVAL, attr];
            e.extend(((v.len() * 4) as u16).to_le_bytes());
            v.iter().for_each(|x| e.extend(x.to_le_bytes()));
            e
        };
        let mut info = sval(EIATTR_REGCOUNT, &[1, regs]);
        info.extend(sval(EIATTR_FRAME_SIZE, &[1, frame]));
        let mut kinfo = vec![0x03, EIATTR_MAXREG_COUNT, 0xff, 0x00, 0x02, EIATTR_NUM_BARRIERS, 1, 0];
        if let Some(t) = max_threads {
            kinfo.extend(sval(EIATTR_MAX_THREADS, &[t, 1, 1]));
        }
        let bodies: Vec<(u32, Vec<u8>, usize)> = vec![
            (0, vec![], 0),
            (3, shstr, 0),
            (3, strtab, 0),
            (SHT_SYMTAB, sym, 0),
            (0x70000000, info, 0),
            (0x70000000, kinfo, 0),
            (SHT_NOBITS, vec![], shared),
        ];
        let mut file = vec![0u8; 64];
        let mut headers = vec![];
        for (i, (kind, body, nobits)) in bodies.into_iter().enumerate() {
            let off = file.len();
            let size = if kind == SHT_NOBITS { nobits } else { body.len() };
            file.extend(body);
            let mut h = vec![0u8; 64];
            h[0..4].copy_from_slice(&offs[i].to_le_bytes());
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[24..32].copy_from_slice(&(off as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            headers.push(h);
        }
        let shoff = file.len();
        headers.into_iter().for_each(|h| file.extend(h));
        file[..6].copy_from_slice(b"\x7fELF\x02\x01");
        file[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        file[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        file[0x3c..0x3e].copy_from_slice(&(names.len() as u16).to_le_bytes());
        file[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        file
    }

    #[test]
    fn reads_an_entry_functions_attributes() {
        let r = read(&elf(68, 128, 4096, Some(256))).unwrap();
        assert_eq!(r.len(), 1);
        let k = &r[0];
        assert_eq!((k.name.as_str(), k.registers, k.frame_bytes, k.static_shared_bytes), ("k", 68, 128, 4096));
        assert_eq!((k.max_threads, k.max_registers, k.barriers), (Some(256), Some(255), 1));
        assert_eq!(read(&elf(40, 0, 0, None)).unwrap()[0].max_threads, None);
        // with the reserved region declared, its 1 KiB is reported apart from the kernel's own
        let k = &read(&elf_with(32, 0, 1024 + 400, None, true)).unwrap()[0];
        assert_eq!((k.static_shared_bytes, k.reserved_shared_bytes), (400, 1024));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert_eq!(read(b"not an elf"), Err(CubinError::NotElf));
        let good = elf(68, 0, 0, None);
        for cut in [70, 200, good.len() - 10] {
            assert!(read(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = good.clone();
        huge[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(read(&huge).is_err());
    }

    #[test]
    fn parses_ptxas_reports_of_entries_only() {
        let log = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'calls' for 'sm_90'\n\
ptxas info    : Function properties for calls\n\
ptxas         .     64 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
ptxas info    : Used 24 registers, used 0 barriers, 64 bytes cumulative stack size\n\
ptxas info    : Compile time = 3.120 ms\n\
ptxas info    : Function properties for _Z6calleePfi\n\
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Compiling entry function 'plain' for 'sm_90'\n\
ptxas info    : Function properties for plain\n\
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
ptxas info    : Used 12 registers, used 1 barriers, 400 bytes smem\n";
        let r = parse_ptxas_log(log);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].name.as_str(), r[0].registers, r[0].frame_bytes), ("calls", 24, 64));
        assert_eq!((r[0].spill_store_bytes, r[0].spill_load_bytes, r[0].shared_bytes), (8, 4, 0));
        assert_eq!((r[1].name.as_str(), r[1].registers, r[1].shared_bytes), ("plain", 12, 400));
    }
}
