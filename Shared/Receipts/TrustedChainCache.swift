import Crypto
import Foundation
import NIOConcurrencyHelpers
import X509

/// Parsed certificates and chain-validation results, cached: receipts and signed transactions carry
/// the same few chains over and over, so a busy server validates each chain once and afterwards
/// checks only the signature over the payload.
///
/// A chain's result is kept with the window in which it holds (the latest notBefore and earliest
/// notAfter of its certificates), so a cached chain is still refused outside that window. Both caches
/// are bounded: a handful of real chains, and hostile variety cannot grow memory.
final class TrustedChainCache: Sendable {
    private struct ValidityWindow {
        let notBefore: Date
        let notAfter: Date
    }

    private let chains = NIOLockedValueBox<[Data: ValidityWindow]>([:])
    /// Keyed by `Data`, which hashes its bytes in bulk (an `[UInt8]` key hashes them one at a time).
    private let certificates = NIOLockedValueBox<[Data: Certificate]>([:])
    private let limit = 1_000

    func certificate(_ der: [UInt8]) throws -> Certificate {
        let key = Data(der)
        if let cached = certificates.withLockedValue({ $0[key] }) { return cached }
        let parsed = try Certificate(derEncoded: der)
        certificates.withLockedValue { cache in
            if cache.count > limit { cache.removeAll() }
            cache[key] = parsed
        }
        return parsed
    }

    /// Whether `leaf` chains through `intermediates` to one of `roots` at `date` under `policy`.
    /// `ders`: the certificates as carried, which identify the chain for the cache. One cache serves one
    /// fixed set of roots (the verifier's own), or `ders` must include the root.
    func isTrusted(
        leaf: Certificate, intermediates: [Certificate], roots: [Certificate], ders: [[UInt8]], key known: Data? = nil, at date: Date,
        @PolicyBuilder policy: () -> some VerifierPolicy
    ) async -> Bool {
        // `known`: the SHA-256 of `ders`, when the caller already has it.
        let key =
            known
            ?? {
                var hasher = SHA256()
                for der in ders { hasher.update(data: der) }
                return Data(hasher.finalize())
            }()
        if let window = chains.withLockedValue({ $0[key] }) {
            return window.notBefore <= date && date <= window.notAfter
        }
        var verifier = Verifier(rootCertificates: CertificateStore(roots), policy: policy)
        guard case .validCertificate(let chain) = await verifier.validate(leaf: leaf, intermediates: CertificateStore(intermediates)) else {
            return false
        }
        let window = ValidityWindow(notBefore: chain.map(\.notValidBefore).max()!, notAfter: chain.map(\.notValidAfter).min()!)
        chains.withLockedValue { cache in
            if cache.count > limit { cache.removeAll() }
            cache[key] = window
        }
        return true
    }
}
