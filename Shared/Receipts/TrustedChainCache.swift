import Crypto
import Foundation
import NIOConcurrencyHelpers
@_spi(FixedExpiryValidationTime) import X509

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
        /// With revocation checks: when the chain must be verified (and its certificates asked about) again.
        var recheckAfter: Date?
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

    /// What a chain verification concluded.
    enum Verdict: Equatable {
        case trusted
        case untrusted
        /// An OCSP responder answered (validly) that a certificate of the chain is revoked.
        case revoked
        /// Revocation is checked hard-fail and a responder could not be asked: retryable.
        case revocationUnknown
    }

    /// A chain to judge: the leaf, the certificates that may link it to a root, the certificates as carried
    /// (`ders`, which identify the chain for the cache; one cache serves one fixed set of roots, or `ders` must
    /// include the root), and the time at which it must hold.
    struct Question {
        let leaf: Certificate
        let intermediates: [Certificate]
        let ders: [[UInt8]]
        let key: Data
        let at: Date

        /// `key`: the SHA-256 of `ders`, when the caller already has it.
        init(leaf: Certificate, intermediates: [Certificate], ders: [[UInt8]], key known: Data? = nil, at: Date) {
            self.leaf = leaf
            self.intermediates = intermediates
            self.ders = ders
            self.at = at
            self.key =
                known
                ?? {
                    var hasher = SHA256()
                    for der in ders { hasher.update(data: der) }
                    return Data(hasher.finalize())
                }()
        }
    }

    /// The verdict on a chain already validated and still within its recheck time, from memory alone (no I/O, no
    /// waiting: callers may use it on an event loop); nil when `verdict` must validate it (first sight, or a
    /// revocation recheck is due).
    func cachedVerdict(_ question: Question, revocation: RevocationChecker? = nil) -> Verdict? {
        guard let window = chains.withLockedValue({ $0[question.key] }) else { return nil }
        if let recheck = window.recheckAfter, recheck <= revocation?.currentDate() ?? Date() { return nil }
        return window.notBefore <= question.at && question.at <= window.notAfter ? .trusted : .untrusted
    }

    /// Runs `check` with chain verdicts from memory; when it asks about a chain whose verdict is not there, that
    /// chain is validated (RFC 5280 at the question's time, Apple's marker extensions; with `revocation`, OCSP,
    /// which may wait on a responder) and `check` runs again with the verdict. Nil only when `check` answers nil
    /// without asking.
    func checked<R>(
        roots: [Certificate], revocation: RevocationChecker?, _ check: ((Question) -> Verdict?) -> R?
    ) async -> R? {
        var asked: Question?
        let fromMemory = check { question in
            if let cached = cachedVerdict(question, revocation: revocation) { return cached }
            asked = question
            return nil
        }
        if let fromMemory { return fromMemory }
        guard let question = asked else { return nil }
        let answer = await verdict(question, roots: roots, revocation: revocation) {
            RFC5280Policy(fixedExpiryValidationTime: question.at)
            AppleMarkerPolicy()
        }
        return check { _ in answer }
    }

    /// Whether the question's leaf chains through its intermediates to one of `roots` at its time under
    /// `policy`, and, with `revocation`, whether no certificate of the chain is revoked now (OCSP).
    ///
    /// With revocation checks a chain is kept no longer than the earliest `nextUpdate` of the answers it got (or
    /// `softFailRecheck` when a responder could not be asked), so a revocation is seen within the responder's own
    /// validity window.
    func verdict(
        _ question: Question, roots: [Certificate], revocation: RevocationChecker? = nil,
        @PolicyBuilder policy: () -> some VerifierPolicy
    ) async -> Verdict {
        let key = question.key
        if let cached = cachedVerdict(question, revocation: revocation) { return cached }
        chains.withLockedValue { _ = $0.removeValue(forKey: key) }
        var verifier = Verifier(rootCertificates: CertificateStore(roots)) {
            policy()
            if let revocation { revocation.policy() }
        }
        let observation = RevocationChecker.Observation()
        let result = await RevocationChecker.$observation.withValue(observation) {
            await verifier.validate(leaf: question.leaf, intermediates: CertificateStore(question.intermediates))
        }
        let seen = observation.seen.withLockedValue { $0 }
        guard case .validCertificate(let chain) = result else {
            if seen.revoked { return .revoked }
            if seen.unanswered, revocation?.configuration.hardFail == true { return .revocationUnknown }
            return .untrusted
        }
        var recheck: Date?
        if let revocation {
            recheck = seen.earliestNextUpdate
            if seen.unanswered {
                let soon = revocation.currentDate().addingTimeInterval(revocation.configuration.softFailRecheck.seconds)
                recheck = min(recheck ?? soon, soon)
            }
        }
        let window = ValidityWindow(
            notBefore: chain.map(\.notValidBefore).max()!, notAfter: chain.map(\.notValidAfter).min()!, recheckAfter: recheck)
        chains.withLockedValue { cache in
            if cache.count > limit { cache.removeAll() }
            cache[key] = window
        }
        return .trusted
    }
}
