//! Names and descriptions of `CUresult` values, with or without a loaded driver.

use crate::{CUresult, RESULT_TEXTS};
use std::fmt;

impl CUresult {
    /// The constant's name, e.g. `"CUDA_ERROR_INVALID_VALUE"`, or `"unknown CUresult"` for a
    /// value the header did not define.
    pub fn name(self) -> &'static str {
        builtin_text(self).map_or("unknown CUresult", |(name, _)| name)
    }

    /// The header's description of the value (its first sentence). A loaded driver's shorter
    /// message is available through [`Driver::error_description`](crate::Driver::error_description).
    pub fn description(self) -> &'static str {
        builtin_text(self).map_or(
            "a CUresult value the bindings' header does not define",
            |(_, description)| description,
        )
    }

    /// `Ok(())` for `CUDA_SUCCESS`, else `Err(self)`.
    ///
    /// # Errors
    /// The value itself when it is not `CUDA_SUCCESS`.
    pub fn ok(self) -> Result<(), CUresult> {
        if self == CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for CUresult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

fn builtin_text(result: CUresult) -> Option<(&'static str, &'static str)> {
    RESULT_TEXTS
        .binary_search_by_key(&result.0, |&(code, _, _)| code)
        .ok()
        .map(|index| (RESULT_TEXTS[index].1, RESULT_TEXTS[index].2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_texts_are_sorted_by_code_for_binary_search() {
        assert!(RESULT_TEXTS.windows(2).all(|pair| pair[0].0 < pair[1].0));
    }

    #[test]
    fn known_values_have_their_header_name_and_description() {
        assert_eq!(CUresult::CUDA_SUCCESS.name(), "CUDA_SUCCESS");
        assert_eq!(
            CUresult::CUDA_ERROR_STUB_LIBRARY.name(),
            "CUDA_ERROR_STUB_LIBRARY"
        );
        assert!(
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
                .description()
                .contains("invalid memory address")
        );
    }

    #[test]
    fn unknown_values_are_named_as_unknown_not_misnamed() {
        let value = CUresult(123_456);
        assert_eq!(value.name(), "unknown CUresult");
        assert_eq!(value.to_string(), "unknown CUresult (123456)");
    }

    #[test]
    fn ok_separates_success_from_errors() {
        assert_eq!(CUresult::CUDA_SUCCESS.ok(), Ok(()));
        assert_eq!(
            CUresult::CUDA_ERROR_NOT_READY.ok(),
            Err(CUresult::CUDA_ERROR_NOT_READY)
        );
    }
}
