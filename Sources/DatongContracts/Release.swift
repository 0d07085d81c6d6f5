/// Datong's release: what every service reports as `datong_build_info{version}` and
/// `datongctl --version` prints. Raised with each release (docs/CONTRIBUTING.md): a rolling
/// upgrade shows two versions side by side in `datongctl status` until it is done.
package enum DatongRelease {
    package static let version = "0.5.0"
}
