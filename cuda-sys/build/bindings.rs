//! Generation of the raw driver bindings from `cuda.h` and `cudaTypedefs.h`.
//!
//! This one module is compiled into two programs: the crate's build script (when it generates at
//! build time) and `cargo xtask bindings` (which writes the committed snapshot). Both therefore
//! produce their output from the same bindgen configuration and the same code generator.
//!
//! The output is one Rust file holding:
//! - bindgen's types and constants (its function declarations are consumed, not emitted: the
//!   library is never linked);
//! - `ENTRY_POINTS`: for every function the header declares, the name and ABI version to ask
//!   `cuGetProcAddress_v2` for, found by matching the declaration against `cudaTypedefs.h`'s
//!   `PFN_<name>_v<version>` typedefs, and the symbol names for the platform-loader fallback;
//! - `DriverFunctions`, a plain struct of optional function pointers, one per entry point;
//! - a method per entry point on `Driver`, and a C-like free function per entry point that calls
//!   through the process-wide driver;
//! - `RESULT_TEXTS`: each `CUresult` value with its name and the header's description of it.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_void};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::ptr;

/// The oldest headers the bindings can be generated from.
pub const MINIMUM_CUDA_VERSION: u32 = 12000;

/// Where the headers are and which CUDA version they declare.
#[derive(Debug, Clone)]
pub struct Headers {
    /// The folder holding `cuda.h` and `cudaTypedefs.h`.
    pub include_dir: PathBuf,
    /// `CUDA_VERSION` from `cuda.h`, e.g. 13050.
    pub cuda_version: u32,
}

impl Headers {
    /// Checks that `include_dir` holds usable headers and reads their version.
    pub fn in_dir(include_dir: &Path) -> Result<Headers, String> {
        let cuda_h = include_dir.join("cuda.h");
        let text = std::fs::read_to_string(&cuda_h)
            .map_err(|e| format!("cannot read {}: {e}", cuda_h.display()))?;
        let cuda_version = text
            .lines()
            .find_map(|line| {
                let rest = line.trim_start().strip_prefix("#define")?.trim_start();
                rest.strip_prefix("CUDA_VERSION")?
                    .trim()
                    .parse::<u32>()
                    .ok()
            })
            .ok_or_else(|| format!("{} does not define CUDA_VERSION", cuda_h.display()))?;
        if cuda_version < MINIMUM_CUDA_VERSION {
            return Err(format!(
                "{} declares CUDA {} but at least CUDA {} headers are needed",
                cuda_h.display(),
                version_text(cuda_version),
                version_text(MINIMUM_CUDA_VERSION)
            ));
        }
        let typedefs_h = include_dir.join("cudaTypedefs.h");
        if !typedefs_h.is_file() {
            return Err(format!(
                "{} has cuda.h but no cudaTypedefs.h, which gives each entry point's ABI version",
                include_dir.display()
            ));
        }
        Ok(Headers {
            include_dir: include_dir.to_path_buf(),
            cuda_version,
        })
    }

    /// The header files the output depends on.
    pub fn files(&self) -> [PathBuf; 2] {
        [
            self.include_dir.join("cuda.h"),
            self.include_dir.join("cudaTypedefs.h"),
        ]
    }
}

/// `13050` as `13.5`.
pub fn version_text(version: u32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
}

/// Generates the bindings file. `provenance` becomes the file's first comment line.
pub fn generate(headers: &Headers, provenance: &str) -> Result<String, String> {
    load_libclang()?;
    let bindgen_output = run_bindgen(headers)?;
    let mut file = syn::parse_file(&bindgen_output)
        .map_err(|e| format!("cannot parse bindgen's output: {e}"))?;
    let functions = take_functions(&mut file)?;
    let results = result_texts(&file)?;
    let extra_args = extra_clang_args();
    let abi = abi_versions(headers, &extra_args)?;
    let plain_listed = listed_versions(headers, Form::Plain)?;
    let per_thread_listed = listed_versions(headers, Form::PerThread)?;
    let per_thread = per_thread_symbols(headers, &extra_args)?;

    let mut entries = Vec::with_capacity(functions.len());
    for function in functions {
        let abi_version = abi.get(&function.name).cloned();
        let per_thread_version = abi_version.as_ref().and_then(|(base, version)| {
            per_thread_version(&plain_listed, &per_thread_listed, base, *version)
        });
        let per_thread_symbol = per_thread.get(&function.name).cloned();
        entries.push(Entry {
            function,
            abi_version,
            per_thread_version,
            per_thread_symbol,
        });
    }

    let mut out = String::new();
    writeln!(out, "// {provenance}").unwrap();
    writeln!(
        out,
        "// Source: cuda.h and cudaTypedefs.h of CUDA {} (CUDA_VERSION {}). Do not edit.",
        version_text(headers.cuda_version),
        headers.cuda_version
    )
    .unwrap();
    out.push('\n');
    out.push_str(&prettyplease::unparse(&file));
    emit_entry_points(&mut out, &entries);
    emit_driver_functions(&mut out, &entries);
    emit_driver_methods(&mut out, &entries);
    emit_free_functions(&mut out, &entries);
    emit_result_texts(&mut out, &results);
    Ok(out)
}

/// Loads libclang for this thread, so that a missing libclang is an error instead of a panic
/// inside bindgen.
pub fn load_libclang() -> Result<(), String> {
    if clang_sys::is_loaded() {
        return Ok(());
    }
    clang_sys::load().map_err(|e| format!("libclang is not available: {e}"))
}

/// The variable bindgen reads extra clang arguments from.
const EXTRA_CLANG_ARGS: &str = "BINDGEN_EXTRA_CLANG_ARGS";

/// The variables that can carry extra clang arguments, most specific first, as bindgen reads
/// them: `BINDGEN_EXTRA_CLANG_ARGS_<target>`, the same with the target's dashes as underscores
/// (both only where a target is known: `TARGET`, set for build scripts), then
/// `BINDGEN_EXTRA_CLANG_ARGS`.
pub fn extra_clang_args_variables(target: Option<&str>) -> Vec<String> {
    let mut variables = Vec::with_capacity(3);
    if let Some(target) = target {
        variables.push(format!("{EXTRA_CLANG_ARGS}_{target}"));
        variables.push(format!("{EXTRA_CLANG_ARGS}_{}", target.replace('-', "_")));
    }
    variables.push(EXTRA_CLANG_ARGS.to_owned());
    variables
}

/// The extra clang arguments bindgen adds to its own parse of `cuda.h`. The declaration walks
/// of this module add the same, so that both parses see the headers alike (a libclang without
/// its own `stddef.h`, such as PyPI's, needs an `-isystem` there too).
pub fn extra_clang_args() -> Vec<String> {
    extra_clang_args_from(|name| std::env::var(name).ok())
}

/// The value of the first of [`extra_clang_args_variables`] that `read` finds, split as a shell
/// would, or kept as one argument when it does not split (bindgen's rule).
fn extra_clang_args_from(read: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let target = read("TARGET");
    let Some(value) = extra_clang_args_variables(target.as_deref())
        .iter()
        .find_map(|variable| read(variable))
    else {
        return Vec::new();
    };
    shlex::split(&value).unwrap_or_else(|| vec![value])
}

fn clang_args(headers: &Headers) -> Vec<String> {
    vec![
        "-x".into(),
        "c".into(),
        "-std=c11".into(),
        format!("-I{}", headers.include_dir.display()),
    ]
}

fn run_bindgen(headers: &Headers) -> Result<String, String> {
    let cuda_h = headers.include_dir.join("cuda.h");
    let bindings = bindgen::Builder::default()
        .header(cuda_h.to_string_lossy())
        .clang_args(clang_args(headers))
        .allowlist_function("cu.*")
        .allowlist_type("CU.*|cu.*")
        .allowlist_var("CU.*|cu.*")
        // A Rust enum holding a value the header did not know is undefined behaviour, and a newer
        // driver returns such values: every C enum becomes a newtype over its integer.
        .default_enum_style(bindgen::EnumVariation::NewType {
            is_bitfield: false,
            is_global: false,
        })
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(true)
        .rust_edition(bindgen::RustEdition::Edition2024)
        .rust_target(bindgen::RustTarget::stable(85, 0).map_err(|e| e.to_string())?)
        .formatter(bindgen::Formatter::None)
        .parse_callbacks(Box::new(DocComments))
        .generate()
        .map_err(|e| format!("bindgen failed on {}: {e}", cuda_h.display()))?;
    Ok(bindings.to_string())
}

/// Turns the header's Doxygen comments into Markdown rustdoc accepts: no indented lines (which
/// rustdoc would compile as Rust doctests) and `\code` blocks fenced as C.
#[derive(Debug)]
struct DocComments;

impl bindgen::callbacks::ParseCallbacks for DocComments {
    fn process_comment(&self, comment: &str) -> Option<String> {
        let mut out = String::with_capacity(comment.len());
        for line in comment.lines() {
            let mut line = line.trim();
            // `\code` may end a line of prose; the block starts on the next line.
            if let Some((before, after)) = line.split_once("\\code") {
                let before = before.trim_end();
                if !before.is_empty() {
                    out.push_str(before);
                    out.push('\n');
                }
                out.push_str("```c\n");
                // Drop a language marker such as `{.c}`.
                line = after.strip_prefix("{.c}").unwrap_or(after).trim();
                if line.is_empty() {
                    continue;
                }
            }
            if let Some((before, after)) = line.split_once("\\endcode") {
                let before = before.trim_end();
                if !before.is_empty() {
                    out.push_str(before);
                    out.push('\n');
                }
                out.push_str("```\n");
                line = after.trim();
                if line.is_empty() {
                    continue;
                }
            }
            out.push_str(line);
            out.push('\n');
        }
        Some(out.trim_end().to_owned())
    }
}

/// One function declared by the header, as bindgen typed it.
///
/// The header's comment on it is not kept: libclang versions disagree on it (libclang 14 attaches
/// none to a declaration whose name is a macro, as `cuMemAlloc` is, libclang 18 does), and the
/// generated file must not depend on which libclang wrote it.
struct Function {
    name: String,
    params: Vec<(String, String)>,
}

/// A function and where the driver table gets it from.
struct Entry {
    function: Function,
    /// The base name and ABI version to ask `cuGetProcAddress_v2` for.
    abi_version: Option<(String, u32)>,
    /// The version to ask for with the per-thread default stream, where it differs.
    per_thread_version: Option<u32>,
    /// The `_ptsz`/`_ptds` symbol, for the platform-loader fallback with the per-thread default
    /// stream.
    per_thread_symbol: Option<String>,
}

/// Removes bindgen's `extern "C"` blocks from the file and returns the functions they declared.
fn take_functions(file: &mut syn::File) -> Result<Vec<Function>, String> {
    let mut functions = Vec::new();
    let mut kept = Vec::with_capacity(file.items.len());
    for item in std::mem::take(&mut file.items) {
        let syn::Item::ForeignMod(block) = item else {
            kept.push(item);
            continue;
        };
        for foreign in block.items {
            let syn::ForeignItem::Fn(declaration) = foreign else {
                return Err("bindgen declared an extern item that is not a function".into());
            };
            functions.push(function_of(&declaration)?);
        }
    }
    file.items = kept;
    if functions.is_empty() {
        return Err("bindgen found no driver functions in cuda.h".into());
    }
    Ok(functions)
}

fn function_of(declaration: &syn::ForeignItemFn) -> Result<Function, String> {
    let signature = &declaration.sig;
    let name = signature.ident.to_string();
    match &signature.output {
        syn::ReturnType::Type(_, ty) if type_text(ty) == "CUresult" => {}
        _ => {
            return Err(format!(
                "{name} does not return CUresult; the table assumes all do"
            ));
        }
    }
    if signature.variadic.is_some() {
        return Err(format!("{name} is variadic"));
    }
    let mut params = Vec::new();
    for input in &signature.inputs {
        let syn::FnArg::Typed(typed) = input else {
            return Err(format!("{name} has a receiver"));
        };
        let syn::Pat::Ident(pattern) = typed.pat.as_ref() else {
            return Err(format!("{name} has a parameter without a plain name"));
        };
        params.push((pattern.ident.to_string(), type_text(&typed.ty)));
    }
    Ok(Function { name, params })
}

fn doc_text(attribute: &syn::Attribute) -> Option<String> {
    if !attribute.path().is_ident("doc") {
        return None;
    }
    let syn::Meta::NameValue(meta) = &attribute.meta else {
        return None;
    };
    match &meta.value {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(text),
            ..
        }) => Some(text.value()),
        _ => None,
    }
}

/// A type as rustfmt-style text (`*mut CUdeviceptr`, `::std::os::raw::c_uint`).
fn type_text(ty: &syn::Type) -> String {
    let file: syn::File = syn::parse_quote!(type T = #ty;);
    let text = prettyplease::unparse(&file);
    text.trim()
        .trim_start_matches("type T = ")
        .trim_end_matches(';')
        .to_owned()
}

/// The `CUresult` constants bindgen emitted, with the first sentence of their documentation.
fn result_texts(file: &syn::File) -> Result<Vec<(String, u64, String)>, String> {
    let mut results = Vec::new();
    for item in &file.items {
        let syn::Item::Impl(block) = item else {
            continue;
        };
        let syn::Type::Path(self_type) = block.self_ty.as_ref() else {
            continue;
        };
        if !self_type.path.is_ident("cudaError_enum") {
            continue;
        }
        for member in &block.items {
            let syn::ImplItem::Const(constant) = member else {
                continue;
            };
            let value = match &constant.expr {
                syn::Expr::Call(call) => match call.args.first() {
                    Some(syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Int(int),
                        ..
                    })) => int.base10_parse::<u64>().map_err(|e| e.to_string())?,
                    _ => return Err(format!("unexpected value for {}", constant.ident)),
                },
                _ => return Err(format!("unexpected value for {}", constant.ident)),
            };
            let doc = constant
                .attrs
                .iter()
                .filter_map(doc_text)
                .collect::<Vec<_>>()
                .join(" ");
            results.push((constant.ident.to_string(), value, first_sentence(&doc)));
        }
    }
    if results.is_empty() {
        return Err("bindgen emitted no CUresult values".into());
    }
    // Sorted by code, so that lookups can search.
    results.sort_by_key(|(_, code, _)| *code);
    results.dedup_by_key(|(_, code, _)| *code);
    Ok(results)
}

fn first_sentence(doc: &str) -> String {
    let text = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = text.trim_start_matches("\\deprecated").trim();
    match text.find(". ") {
        Some(end) => text[..=end].to_owned(),
        None => text.to_owned(),
    }
}

/// Walks the top-level declarations of a header of `headers` with libclang, parsed with the
/// arguments bindgen gets plus `-D` for each of `defines`.
fn visit_declarations(
    headers: &Headers,
    header: &str,
    defines: &[&str],
    extra_args: &[String],
    visit: impl FnMut(clang_sys::CXCursor),
) -> Result<(), String> {
    let mut args = clang_args(headers);
    args.extend(defines.iter().map(|define| format!("-D{define}")));
    args.extend(extra_args.iter().cloned());
    walk_declarations(&headers.include_dir.join(header), &args, visit)
}

/// Parses `path` with `args` and calls `visit` on each top-level declaration. A parse with
/// errors visits nothing and fails with clang's diagnostics.
fn walk_declarations(
    path: &Path,
    args: &[String],
    mut visit: impl FnMut(clang_sys::CXCursor),
) -> Result<(), String> {
    let c_path = CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    let c_args = args
        .iter()
        .map(|arg| CString::new(arg.as_str()).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let arg_pointers = c_args.iter().map(|arg| arg.as_ptr()).collect::<Vec<_>>();
    let arg_count = i32::try_from(arg_pointers.len()).map_err(|e| e.to_string())?;

    extern "C" fn visitor(
        cursor: clang_sys::CXCursor,
        _parent: clang_sys::CXCursor,
        data: clang_sys::CXClientData,
    ) -> clang_sys::CXChildVisitResult {
        // SAFETY: `data` is the `&mut dyn FnMut` passed to `clang_visitChildren` below, alive and
        // not otherwise borrowed for the whole visit.
        let visit = unsafe { &mut *data.cast::<&mut dyn FnMut(clang_sys::CXCursor)>() };
        visit(cursor);
        clang_sys::CXChildVisit_Continue
    }

    // SAFETY: libclang is loaded on this thread (`load_libclang`); every pointer passed lives until
    // the translation unit and index are disposed at the end of this block.
    unsafe {
        let index = clang_sys::clang_createIndex(0, 0);
        let mut unit = ptr::null_mut();
        let code = clang_sys::clang_parseTranslationUnit2(
            index,
            c_path.as_ptr(),
            arg_pointers.as_ptr(),
            arg_count,
            ptr::null_mut(),
            0,
            clang_sys::CXTranslationUnit_SkipFunctionBodies,
            &mut unit,
        );
        if code != clang_sys::CXError_Success || unit.is_null() {
            clang_sys::clang_disposeIndex(index);
            return Err(format!(
                "libclang could not parse {} (CXErrorCode {code}) with arguments {args:?}",
                path.display()
            ));
        }
        let mut errors = 0;
        let mut diagnostics = Vec::new();
        for i in 0..clang_sys::clang_getNumDiagnostics(unit) {
            let diagnostic = clang_sys::clang_getDiagnostic(unit, i);
            let severity = clang_sys::clang_getDiagnosticSeverity(diagnostic);
            if severity >= clang_sys::CXDiagnostic_Error {
                errors += 1;
            }
            if severity >= clang_sys::CXDiagnostic_Warning {
                diagnostics.push(owned_string(clang_sys::clang_formatDiagnostic(
                    diagnostic,
                    clang_sys::clang_defaultDiagnosticDisplayOptions(),
                )));
            }
            clang_sys::clang_disposeDiagnostic(diagnostic);
        }
        if errors == 0 {
            let mut visit: &mut dyn FnMut(clang_sys::CXCursor) = &mut visit;
            clang_sys::clang_visitChildren(
                clang_sys::clang_getTranslationUnitCursor(unit),
                visitor,
                (&mut visit as *mut &mut dyn FnMut(clang_sys::CXCursor)).cast::<c_void>(),
            );
        }
        clang_sys::clang_disposeTranslationUnit(unit);
        clang_sys::clang_disposeIndex(index);
        if errors > 0 {
            // One line: the build script shows it in a single `cargo:warning` when it falls back.
            return Err(format!(
                "libclang reported {errors} error{} parsing {}: {}",
                if errors == 1 { "" } else { "s" },
                path.display(),
                diagnostics.join("; ")
            ));
        }
    }
    Ok(())
}

fn cursor_name(cursor: clang_sys::CXCursor) -> String {
    // SAFETY: `cursor` comes from a live translation unit; the string is copied, then disposed.
    unsafe { owned_string(clang_sys::clang_getCursorSpelling(cursor)) }
}

fn canonical_spelling(ty: clang_sys::CXType) -> String {
    // SAFETY: `ty` comes from a live translation unit; the string is copied, then disposed.
    unsafe {
        owned_string(clang_sys::clang_getTypeSpelling(
            clang_sys::clang_getCanonicalType(ty),
        ))
    }
}

/// # Safety
/// `string` must be a string libclang returned and nobody disposed of yet.
unsafe fn owned_string(string: clang_sys::CXString) -> String {
    // SAFETY: per the caller, `string` is live; libclang's C string is valid until disposed.
    unsafe {
        let text = clang_sys::clang_getCString(string);
        let owned = if text.is_null() {
            String::new()
        } else {
            CStr::from_ptr(text).to_string_lossy().into_owned()
        };
        clang_sys::clang_disposeString(string);
        owned
    }
}

/// Maps each declared function to the base name and version to ask `cuGetProcAddress_v2` for
/// ([`abi_version_of`]).
fn abi_versions(
    headers: &Headers,
    extra_args: &[String],
) -> Result<BTreeMap<String, (String, u32)>, String> {
    let listed = listed_versions(headers, Form::Plain)?;
    let declared = typedef_declarations(headers, &[], extra_args)?;
    let mut versions = BTreeMap::new();
    for (name, signature) in &declared.functions {
        if let Some(abi) = abi_version_of(name, signature, &listed, &declared.typedefs) {
            versions.insert(name.clone(), abi);
        }
    }
    Ok(versions)
}

/// What a parse of `cudaTypedefs.h` (which includes `cuda.h`) declares.
pub struct Declarations {
    /// Every function whose name starts with `cu`, but those defined `static` in the header,
    /// with its canonical signature.
    pub functions: BTreeMap<String, String>,
    /// Every `PFN_<base>_v<N>` typedef, by `(base, N)`, with the canonical signature of the
    /// function it points to.
    pub typedefs: BTreeMap<(String, u32), String>,
}

/// The declarations of `cudaTypedefs.h` parsed with `-D` for each of `defines`.
pub fn typedef_declarations(
    headers: &Headers,
    defines: &[&str],
    extra_args: &[String],
) -> Result<Declarations, String> {
    let mut functions = BTreeMap::new();
    let mut typedefs: BTreeMap<(String, u32), String> = BTreeMap::new();
    visit_declarations(headers, "cudaTypedefs.h", defines, extra_args, |cursor| {
        // SAFETY: the cursor is live for the duration of the visit.
        let kind = unsafe { clang_sys::clang_getCursorKind(cursor) };
        let name = cursor_name(cursor);
        // A `static inline` function (the per-thread form of cuGetProcAddress_v2) is the
        // header's own code, no function of the library.
        // SAFETY: as above.
        let is_static =
            unsafe { clang_sys::clang_Cursor_getStorageClass(cursor) } == clang_sys::CX_SC_Static;
        if kind == clang_sys::CXCursor_FunctionDecl && name.starts_with("cu") && !is_static {
            // SAFETY: as above.
            let ty = unsafe { clang_sys::clang_getCursorType(cursor) };
            functions.insert(name, canonical_spelling(ty));
        } else if kind == clang_sys::CXCursor_TypedefDecl {
            let Some((base, version)) = parse_pfn_name(&name) else {
                return;
            };
            // SAFETY: as above; a PFN typedef is a pointer to a function type.
            let signature = unsafe {
                let pointer = clang_sys::clang_getCanonicalType(
                    clang_sys::clang_getTypedefDeclUnderlyingType(cursor),
                );
                canonical_spelling(clang_sys::clang_getPointeeType(pointer))
            };
            typedefs.insert((base.to_owned(), version), signature);
        }
    })?;
    Ok(Declarations {
        functions,
        typedefs,
    })
}

/// The base name and ABI version to ask `cuGetProcAddress_v2` for the function `name` of
/// canonical signature `signature`; `None` when `cudaTypedefs.h` lists no ABI of it.
///
/// `cudaTypedefs.h` lists each ABI of an entry point as `PFN_<base>_v<N>`, `N` being the CUDA
/// version that introduced it (`listed`, with their signatures in `typedefs`); the driver answers
/// a request for `(base, version)` with the newest ABI not newer than `version`. A declared
/// `<base>_v<K>` is the K-th ABI of `<base>` and a plain `<base>` the first, counting every
/// listed version (those inside the header's `__CUDA_API_VERSION_INTERNAL` section too). The
/// version found that way must have the declaration's exact canonical signature; where it does
/// not, or the count does not reach, the smallest version with that signature is used. Counting
/// matters where a new ABI kept the old signature: `cuEventElapsedTime_v2` has the signature of
/// `PFN_cuEventElapsedTime_v2000` but is `PFN_cuEventElapsedTime_v12080`, and asking for 2000
/// would return the old function.
pub fn abi_version_of(
    name: &str,
    signature: &str,
    listed: &BTreeMap<String, Vec<u32>>,
    typedefs: &BTreeMap<(String, u32), String>,
) -> Option<(String, u32)> {
    let (base, ordinal) = match split_version_suffix(name) {
        Some((base, ordinal)) if listed.contains_key(base) => (base, ordinal),
        _ => (name, 1),
    };
    let matches = |version: &u32| {
        typedefs
            .get(&(base.to_owned(), *version))
            .map(String::as_str)
            == Some(signature)
    };
    let abi = listed.get(base)?;
    let counted = abi.get(ordinal - 1).copied().filter(matches);
    counted
        .or_else(|| abi.iter().copied().find(matches))
        .map(|version| (base.to_owned(), version))
}

/// `PFN_cuMemAlloc_v3020` as `("cuMemAlloc", 3020)`; `None` for `_ptsz`/`_ptds` and other names.
pub fn parse_pfn_name(name: &str) -> Option<(&str, u32)> {
    let rest = name.strip_prefix("PFN_")?;
    let (base, version) = rest.rsplit_once("_v")?;
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((base, version.parse().ok()?))
}

/// Which of an entry point's typedefs in `cudaTypedefs.h`: `PFN_<base>_v<N>` or
/// `PFN_<base>_v<N>_ptsz` (or `_ptds`), the form for the per-thread default stream.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `PFN_<base>_v<N>`.
    Plain,
    /// `PFN_<base>_v<N>_ptsz` or `_ptds`.
    PerThread,
}

/// The versions `cudaTypedefs.h` lists for each base name in `form`, sorted.
pub fn listed_versions(
    headers: &Headers,
    form: Form,
) -> Result<BTreeMap<String, Vec<u32>>, String> {
    let typedefs_h = headers.include_dir.join("cudaTypedefs.h");
    let text = std::fs::read_to_string(&typedefs_h)
        .map_err(|e| format!("cannot read {}: {e}", typedefs_h.display()))?;
    let mut listed: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (position, _) in text.match_indices("PFN_") {
        let name: String = text[position..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let per_thread = name
            .strip_suffix("_ptsz")
            .or_else(|| name.strip_suffix("_ptds"));
        let typedef = match form {
            Form::Plain => Some(name.as_str()),
            Form::PerThread => per_thread,
        };
        if let Some((base, version)) = typedef.and_then(parse_pfn_name) {
            listed.entry(base.to_owned()).or_default().push(version);
        }
    }
    for versions in listed.values_mut() {
        versions.sort_unstable();
        versions.dedup();
    }
    Ok(listed)
}

/// The version to ask `cuGetProcAddress_v2` for the per-thread form of the ABI `(base, version)`,
/// when it is not `version` itself: the per-thread forms of the oldest entry points came later
/// than their ABI (`cuEventRecord` is 2000, its `_ptsz` form 7000), and the driver finds no
/// per-thread form at a version older than the form. The form is the first one listed at or
/// after `version` and before the base name's next ABI; `None` when there is none, or it is
/// `version`.
fn per_thread_version(
    plain_listed: &BTreeMap<String, Vec<u32>>,
    per_thread_listed: &BTreeMap<String, Vec<u32>>,
    base: &str,
    version: u32,
) -> Option<u32> {
    let next_abi = plain_listed
        .get(base)
        .and_then(|versions| versions.iter().copied().find(|&other| other > version))
        .unwrap_or(u32::MAX);
    per_thread_listed
        .get(base)?
        .iter()
        .copied()
        .find(|&form| form >= version && form < next_abi)
        .filter(|&form| form != version)
}

/// `cuMemAlloc_v2` as `("cuMemAlloc", 2)`; `None` when there is no `_v<K>` suffix.
fn split_version_suffix(name: &str) -> Option<(&str, usize)> {
    let (base, suffix) = name.rsplit_once("_v")?;
    let ordinal = suffix.parse::<usize>().ok().filter(|k| *k >= 1)?;
    suffix
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then_some((base, ordinal))
}

/// The `_ptsz`/`_ptds` symbol of each function that has one, from a second parse of `cuda.h`
/// with `CUDA_API_PER_THREAD_DEFAULT_STREAM` defined.
fn per_thread_symbols(
    headers: &Headers,
    extra_args: &[String],
) -> Result<BTreeMap<String, String>, String> {
    let mut symbols = BTreeMap::new();
    visit_declarations(
        headers,
        "cuda.h",
        &["CUDA_API_PER_THREAD_DEFAULT_STREAM"],
        extra_args,
        |cursor| {
            // SAFETY: the cursor is live for the duration of the visit.
            let kind = unsafe { clang_sys::clang_getCursorKind(cursor) };
            if kind != clang_sys::CXCursor_FunctionDecl {
                return;
            }
            let name = cursor_name(cursor);
            let base = name
                .strip_suffix("_ptsz")
                .or_else(|| name.strip_suffix("_ptds"));
            if let Some(base) = base {
                symbols.insert(base.to_owned(), name);
            }
        },
    )?;
    Ok(symbols)
}

fn params_declaration(function: &Function) -> String {
    function
        .params
        .iter()
        .map(|(name, ty)| format!("{name}: {ty}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn params_forwarded(function: &Function) -> String {
    function
        .params
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn pointer_type(function: &Function) -> String {
    let params = function
        .params
        .iter()
        .map(|(_, ty)| ty.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    format!("unsafe extern \"C\" fn({params}) -> CUresult")
}

fn emit_entry_points(out: &mut String, entries: &[Entry]) {
    out.push_str(
        "\n/// The number of driver entry points the header declares.\n\
         pub const ENTRY_POINT_COUNT: usize = ",
    );
    writeln!(out, "{};", entries.len()).unwrap();
    out.push_str(
        "\n/// Every entry point the header declares, in declaration order, with where the driver \
         table\n/// gets it from.\n\
         pub static ENTRY_POINTS: [EntryPoint; ENTRY_POINT_COUNT] = [\n",
    );
    for entry in entries {
        let name = &entry.function.name;
        let proc = match &entry.abi_version {
            Some((base, version)) => format!("Some((c\"{base}\", {version}))"),
            None => "None".into(),
        };
        let per_thread_version = match entry.per_thread_version {
            Some(version) => format!("Some({version})"),
            None => "None".into(),
        };
        let per_thread = match &entry.per_thread_symbol {
            Some(symbol) => format!("Some(c\"{symbol}\")"),
            None => "None".into(),
        };
        writeln!(
            out,
            "    EntryPoint {{ symbol: c\"{name}\", proc_address: {proc}, per_thread_version: {per_thread_version}, per_thread_symbol: {per_thread} }},"
        )
        .unwrap();
    }
    out.push_str("];\n");
}

fn emit_driver_functions(out: &mut String, entries: &[Entry]) {
    out.push_str(
        "\n/// The driver's entry points as resolved from one driver library: `None` where that \
         driver does\n/// not have the entry point (or has it only at an older ABI than the \
         header's).\n\
         #[derive(Clone, Copy)]\n\
         pub struct DriverFunctions {\n",
    );
    for entry in entries {
        let function = &entry.function;
        writeln!(
            out,
            "    /// [`{name}`](crate::{name}), if the driver has it.\n    pub {name}: Option<{ty}>,",
            name = function.name,
            ty = pointer_type(function)
        )
        .unwrap();
    }
    out.push_str("}\n\nimpl DriverFunctions {\n");
    out.push_str(
        "    /// Builds the table from one address per entry of [`ENTRY_POINTS`], null where \
         missing.\n    ///\n    /// # Safety\n    /// Each non-null address must be the entry \
         point at the same index of [`ENTRY_POINTS`],\n    /// with the ABI the header declares \
         for it.\n    \
         pub(crate) unsafe fn from_addresses(addresses: &[*mut ::std::ffi::c_void; \
         ENTRY_POINT_COUNT]) -> Self {\n        \
         // SAFETY: `Option<unsafe extern \"C\" fn(..)>` has the layout of a nullable pointer, \
         and the\n        // caller guarantees each address has the declared ABI.\n        \
         unsafe {\n            Self {\n",
    );
    for (index, entry) in entries.iter().enumerate() {
        writeln!(
            out,
            "                {name}: ::std::mem::transmute::<*mut ::std::ffi::c_void, Option<{ty}>>(addresses[{index}]),",
            name = entry.function.name,
            ty = pointer_type(&entry.function)
        )
        .unwrap();
    }
    out.push_str("            }\n        }\n    }\n}\n");
}

fn emit_driver_methods(out: &mut String, entries: &[Entry]) {
    out.push_str("\nimpl Driver {\n");
    for (index, entry) in entries.iter().enumerate() {
        let function = &entry.function;
        writeln!(
            out,
            "    /// Calls [`{name}`](crate::{name}) of this driver; `CUDA_ERROR_NOT_FOUND` when \
             this driver lacks it.\n    \
             ///\n    /// # Safety\n    /// The arguments must meet the driver's requirements for \
             `{name}` (valid pointers and\n    /// handles, as the CUDA driver API documents).\n    \
             #[inline]\n    \
             pub unsafe fn {name}(&self, {params}) -> CUresult {{\n        \
             match self.functions().{name} {{\n            \
             // SAFETY: the pointer has the declared ABI (resolved at its ABI version) and the \
             caller\n            // meets the driver's requirements for the arguments.\n            \
             Some(entry_point_) => unsafe {{ entry_point_({args}) }},\n            \
             None => self.missing_entry_point({index}),\n        }}\n    }}\n",
            name = function.name,
            params = params_declaration(function),
            args = params_forwarded(function),
        )
        .unwrap();
    }
    out.push_str("}\n");
}

fn emit_free_functions(out: &mut String, entries: &[Entry]) {
    let declared: std::collections::BTreeSet<&str> = entries
        .iter()
        .map(|entry| entry.function.name.as_str())
        .collect();
    for entry in entries {
        let function = &entry.function;
        write!(
            out,
            "\n/// `{}` of the [CUDA driver API](https://docs.nvidia.com/cuda/cuda-driver-api/)",
            function.name
        )
        .unwrap();
        let mut alias = String::new();
        match &entry.abi_version {
            Some((base, version)) if *base != function.name => {
                writeln!(
                    out,
                    ": the ABI of `{base}` introduced in CUDA {}.",
                    version_text(*version)
                )
                .unwrap();
                // A search for the name C code calls finds the function it resolves to.
                if !declared.contains(base.as_str()) {
                    alias = format!("#[doc(alias = \"{base}\")]\n");
                }
            }
            _ => out.push_str(".\n"),
        }
        writeln!(
            out,
            "///\n/// Calls through the process-wide driver ([`driver`](crate::driver)): \
             `CUDA_ERROR_NOT_FOUND` when it\n/// lacks this entry point, the load error's code \
             when it could not be loaded.\n\
             ///\n/// # Safety\n/// The arguments must meet the driver's requirements for \
             `{name}` (valid pointers and\n/// handles, as the CUDA driver API documents).\n\
             {alias}#[inline]\n\
             pub unsafe fn {name}({params}) -> CUresult {{\n    \
             match crate::driver() {{\n        \
             // SAFETY: the caller meets the driver's requirements for the arguments.\n        \
             Ok(process_driver_) => unsafe {{ process_driver_.{name}({args}) }},\n        \
             Err(load_error_) => load_error_.result(),\n    }}\n}}",
            name = function.name,
            params = params_declaration(function),
            args = params_forwarded(function),
        )
        .unwrap();
    }
}

fn emit_result_texts(out: &mut String, results: &[(String, u64, String)]) {
    out.push_str(
        "\n/// Each `CUresult` value the header defines, sorted by code: its code, name and the \
         header's\n/// description.\n\
         pub static RESULT_TEXTS: &[(u32, &str, &str)] = &[\n",
    );
    for (name, value, description) in results {
        writeln!(out, "    ({value}, {name:?}, {description:?}),").unwrap();
    }
    out.push_str("];\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read_from<'a>(variables: &'a HashMap<&str, &str>) -> impl Fn(&str) -> Option<String> + 'a {
        |name| variables.get(name).map(|value| (*value).to_owned())
    }

    #[test]
    fn a_per_thread_form_is_asked_for_at_its_own_version_within_its_abi() {
        let listed = |entries: &[(&str, &[u32])]| -> BTreeMap<String, Vec<u32>> {
            entries
                .iter()
                .map(|(base, versions)| ((*base).to_owned(), versions.to_vec()))
                .collect()
        };
        let plain = listed(&[
            ("cuEventRecord", &[2000]),
            ("cuStreamGetCtx", &[9020, 12050]),
            ("cuMemPrefetchAsync", &[8000, 12020]),
            ("cuInit", &[2000]),
        ]);
        let per_thread = listed(&[
            ("cuEventRecord", &[7000]),
            ("cuStreamGetCtx", &[9020, 12050]),
            ("cuMemPrefetchAsync", &[8000, 12020]),
        ]);
        let version = |base, abi| per_thread_version(&plain, &per_thread, base, abi);
        assert_eq!(version("cuEventRecord", 2000), Some(7000), "came later");
        assert_eq!(version("cuStreamGetCtx", 9020), None, "the same version");
        assert_eq!(version("cuStreamGetCtx", 12050), None);
        assert_eq!(version("cuMemPrefetchAsync", 8000), None);
        assert_eq!(version("cuInit", 2000), None, "no per-thread form");
        let later_abi = listed(&[("cuOld", &[2000, 5000])]);
        let form_of_the_later_abi = listed(&[("cuOld", &[7000])]);
        assert_eq!(
            per_thread_version(&later_abi, &form_of_the_later_abi, "cuOld", 2000),
            None,
            "the form at 7000 is the 5000 ABI's, not the 2000 one's"
        );
        assert_eq!(
            per_thread_version(&later_abi, &form_of_the_later_abi, "cuOld", 5000),
            Some(7000)
        );
    }

    #[test]
    fn extra_clang_args_prefer_the_targets_own_variable_as_bindgen_does() {
        let mut variables = HashMap::from([
            ("TARGET", "x86_64-unknown-linux-gnu"),
            ("BINDGEN_EXTRA_CLANG_ARGS", "-DGENERAL"),
            (
                "BINDGEN_EXTRA_CLANG_ARGS_x86_64_unknown_linux_gnu",
                "-DUNDERSCORES",
            ),
            (
                "BINDGEN_EXTRA_CLANG_ARGS_x86_64-unknown-linux-gnu",
                "-DEXACT",
            ),
        ]);
        assert_eq!(extra_clang_args_from(read_from(&variables)), ["-DEXACT"]);
        variables.remove("BINDGEN_EXTRA_CLANG_ARGS_x86_64-unknown-linux-gnu");
        assert_eq!(
            extra_clang_args_from(read_from(&variables)),
            ["-DUNDERSCORES"]
        );
        variables.remove("BINDGEN_EXTRA_CLANG_ARGS_x86_64_unknown_linux_gnu");
        assert_eq!(extra_clang_args_from(read_from(&variables)), ["-DGENERAL"]);
        variables.remove("BINDGEN_EXTRA_CLANG_ARGS");
        assert!(extra_clang_args_from(read_from(&variables)).is_empty());
    }

    #[test]
    fn without_a_target_only_the_plain_variable_counts() {
        let variables = HashMap::from([
            (
                "BINDGEN_EXTRA_CLANG_ARGS_x86_64-unknown-linux-gnu",
                "-DEXACT",
            ),
            ("BINDGEN_EXTRA_CLANG_ARGS", "-DGENERAL"),
        ]);
        assert_eq!(extra_clang_args_from(read_from(&variables)), ["-DGENERAL"]);
        assert_eq!(
            extra_clang_args_variables(None),
            ["BINDGEN_EXTRA_CLANG_ARGS"]
        );
    }

    #[test]
    fn extra_clang_args_split_as_a_shell_would_or_stay_whole() {
        let variables = HashMap::from([(
            "BINDGEN_EXTRA_CLANG_ARGS",
            "-isystem '/opt/clang 18/include' -DX=1",
        )]);
        assert_eq!(
            extra_clang_args_from(read_from(&variables)),
            ["-isystem", "/opt/clang 18/include", "-DX=1"]
        );
        let unbalanced = HashMap::from([("BINDGEN_EXTRA_CLANG_ARGS", "-I'/opt/x")]);
        assert_eq!(extra_clang_args_from(read_from(&unbalanced)), ["-I'/opt/x"]);
    }

    fn entry(name: &str, abi: Option<(&str, u32)>) -> Entry {
        Entry {
            function: Function {
                name: name.to_owned(),
                params: vec![("flags".to_owned(), "::std::os::raw::c_uint".to_owned())],
            },
            abi_version: abi.map(|(base, version)| (base.to_owned(), version)),
            per_thread_version: None,
            per_thread_symbol: None,
        }
    }

    /// The generated text of the free function `name`, from its doc comment to its body.
    fn free_function<'a>(out: &'a str, name: &str) -> &'a str {
        let start = out
            .find(&format!("/// `{name}` of"))
            .unwrap_or_else(|| panic!("no doc line for {name} in {out}"));
        let end = start + out[start..].find("\n}").expect("a body");
        &out[start..end]
    }

    #[test]
    fn free_functions_name_the_abi_they_resolve_and_alias_a_c_name_the_header_does_not_declare() {
        let entries = [
            entry("cuInit", Some(("cuInit", 2000))),
            entry("cuMemAlloc_v2", Some(("cuMemAlloc", 3020))),
            entry("cuLaunchHostFunc", Some(("cuLaunchHostFunc", 10000))),
            entry("cuLaunchHostFunc_v2", Some(("cuLaunchHostFunc", 13010))),
        ];
        let mut out = String::new();
        emit_free_functions(&mut out, &entries);

        let init = free_function(&out, "cuInit");
        assert!(init.starts_with(
            "/// `cuInit` of the [CUDA driver API](https://docs.nvidia.com/cuda/cuda-driver-api/).\n"
        ));
        assert!(!init.contains("doc(alias"));
        let alloc = free_function(&out, "cuMemAlloc_v2");
        assert!(alloc.contains(": the ABI of `cuMemAlloc` introduced in CUDA 3.2.\n"));
        assert!(alloc.contains("#[doc(alias = \"cuMemAlloc\")]\n#[inline]\n"));
        let launch = free_function(&out, "cuLaunchHostFunc_v2");
        assert!(launch.contains(": the ABI of `cuLaunchHostFunc` introduced in CUDA 13.1.\n"));
        assert!(
            !launch.contains("doc(alias"),
            "cuLaunchHostFunc is a function of its own"
        );
        // Only the generator's own text: no header comment, whose presence depends on libclang.
        assert_eq!(out.matches("#[doc = ").count(), 0);
    }

    /// A header that parses only with `-DCUDA_HOST_PROBE`, in a folder of its own.
    fn probe_header(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the temporary folder is created");
        let path = dir.join("probe.h");
        std::fs::write(
            &path,
            "#ifndef CUDA_HOST_PROBE\n#error CUDA_HOST_PROBE is not defined\n#endif\n\
             int cuProbe(int value);\n",
        )
        .expect("the header is written");
        path
    }

    /// Whether libclang loads here; the tests that parse say why they did not run otherwise.
    fn libclang_available(test: &str) -> bool {
        match load_libclang() {
            Ok(()) => true,
            Err(reason) => {
                eprintln!("skipped {test}: {reason}");
                false
            }
        }
    }

    #[test]
    fn a_failed_parse_reports_clangs_diagnostics() {
        const TEST: &str = "a_failed_parse_reports_clangs_diagnostics";
        if !libclang_available(TEST) {
            return;
        }
        let header = probe_header(TEST);
        let mut visited = 0;
        let error = walk_declarations(&header, &["-x".into(), "c".into()], |_| visited += 1)
            .expect_err("the header's #error fails the parse");
        assert!(error.contains("1 error parsing"), "{error}");
        assert!(
            error.contains("probe.h:2:2: error: CUDA_HOST_PROBE is not defined"),
            "clang's diagnostic is missing: {error}"
        );
        assert!(!error.contains('\n'), "not one line: {error}");
        assert_eq!(visited, 0);
        let _ = std::fs::remove_dir_all(header.parent().expect("a folder"));
    }

    #[test]
    fn the_declaration_walk_parses_with_the_extra_clang_args() {
        const TEST: &str = "the_declaration_walk_parses_with_the_extra_clang_args";
        if !libclang_available(TEST) {
            return;
        }
        let header = probe_header(TEST);
        let headers = Headers {
            include_dir: header.parent().expect("a folder").to_path_buf(),
            cuda_version: MINIMUM_CUDA_VERSION,
        };
        let variables = HashMap::from([("BINDGEN_EXTRA_CLANG_ARGS", "-DCUDA_HOST_PROBE")]);
        let extra_args = extra_clang_args_from(read_from(&variables));
        let mut names = Vec::new();
        visit_declarations(&headers, "probe.h", &[], &extra_args, |cursor| {
            names.push(cursor_name(cursor));
        })
        .expect("the extra argument defines the probe");
        assert!(names.contains(&"cuProbe".to_owned()), "{names:?}");
        let _ = std::fs::remove_dir_all(&headers.include_dir);
    }
}
