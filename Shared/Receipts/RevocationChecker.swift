import Foundation
import NIOConcurrencyHelpers
import X509

/// Online revocation checks (OCSP) of the certificates that sign receipts and JWS, as Apple's server library
/// makes them: each certificate of a chain that names an OCSP responder is asked about, through
/// swift-certificates' `OCSPVerifierPolicy` (which checks the answer's signature, its certificate id and its
/// validity window); this class is its requester. It adds:
///
/// - a cache of answers per certificate, kept until the answer's `nextUpdate` (never past it; answers carrying a
///   nonce are for one request and are not kept), so a busy server asks once per certificate per validity window;
/// - a bounded wait (`timeout`) for a responder, and a short pause (`unreachableBackoff`) before a responder that
///   could not be reached is asked again;
/// - the policy for a responder that cannot be reached: soft-fail (the default; the chain is accepted, a warning is
///   logged, and the chain is checked again after `softFailRecheck`) or hard-fail (the verification fails with a
///   retryable `revocationUnknown`, so the caller answers `unavailable` and the purchase is tried again later).
///
/// A revoked certificate is refused in both modes (`revoked`).
public final class RevocationChecker: OCSPRequester, Sendable {
    public struct Configuration: Sendable {
        public var hardFail = false
        /// The longest wait for one responder's answer.
        public var timeout: Duration = .seconds(5)
        /// After a responder could not be reached, how long it is not asked again.
        public var unreachableBackoff: Duration = .seconds(10)
        /// How long a chain accepted without an answer (soft-fail) is trusted before it is checked again.
        public var softFailRecheck: Duration = .seconds(60)
        public init() {}
    }

    /// Sends a DER request to a responder URL and answers the DER response (HTTP POST, `application/ocsp-request`);
    /// throws when the responder cannot be reached or does not answer with 200 within `timeout`.
    public typealias Transport = @Sendable (_ request: [UInt8], _ uri: String, _ timeout: Duration) async throws -> [UInt8]

    public let configuration: Configuration
    private let transport: Transport
    private let warn: @Sendable (String) -> Void
    private let now: @Sendable () -> Date

    private struct Cached {
        let bytes: [UInt8]
        let summary: OCSPMessages.ResponseSummary
        let until: Date
    }

    private struct State {
        var answers: [String: Cached] = [:]
        var unreachableUntil: [String: Date] = [:]
        var responderQueries = 0
        var cacheHits = 0
    }

    private let state = NIOLockedValueBox(State())
    private static let cacheLimit = 10_000

    public init(
        configuration: Configuration = .init(), transport: @escaping Transport, warn: @escaping @Sendable (String) -> Void = { _ in },
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.configuration = configuration
        self.transport = transport
        self.warn = warn
        self.now = now
    }

    /// Requests sent to responders so far (cached answers not counted).
    public var responderQueries: Int { state.withLockedValue { $0.responderQueries } }
    /// Questions answered from the cache so far.
    public var cacheHits: Int { state.withLockedValue { $0.cacheHits } }

    /// Now, as this checker sees it (its cache and the chain cache's rechecks run on it).
    func currentDate() -> Date { now() }

    /// The policy to add to a chain verification.
    func policy() -> OCSPVerifierPolicy<RevocationChecker> {
        OCSPVerifierPolicy(failureMode: configuration.hardFail ? .hard : .soft, requester: self)
    }

    /// What the checks of one chain verification saw (a task-local, set around the verification).
    final class Observation: Sendable {
        struct Seen {
            var revoked = false
            var unanswered = false
            var earliestNextUpdate: Date?
        }
        let seen = NIOLockedValueBox(Seen())

        func record(_ summary: OCSPMessages.ResponseSummary) {
            seen.withLockedValue { seen in
                if summary.status == .revoked { seen.revoked = true }
                if let next = summary.nextUpdate { seen.earliestNextUpdate = min(seen.earliestNextUpdate ?? next, next) }
            }
        }
    }

    @TaskLocal static var observation: Observation?

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    public func query(request: [UInt8], uri: String) async -> OCSPRequesterQueryResult {
        let observation = Self.observation
        let key = OCSPMessages.certID(inRequest: request).map { uri + " " + $0.der.map { String($0, radix: 16) }.joined(separator: ".") }
        let now = self.now()
        enum Plan {
            case cached(Cached)
            case unreachable
            case ask
        }
        let plan = state.withLockedValue { state -> Plan in
            if let key, let cached = state.answers[key], cached.until > now {
                state.cacheHits += 1
                return .cached(cached)
            }
            if let until = state.unreachableUntil[uri], until > now { return .unreachable }
            state.responderQueries += 1
            return .ask
        }
        switch plan {
        case .cached(let cached):
            observation?.record(cached.summary)
            return .response(cached.bytes)
        case .unreachable:
            return unanswered(uri, "the OCSP responder \(uri) could not be reached a moment ago", observation, log: false)
        case .ask:
            break
        }
        let bytes: [UInt8]
        do {
            bytes = try await transport(request, uri, configuration.timeout)
        } catch {
            state.withLockedValue { $0.unreachableUntil[uri] = now.addingTimeInterval(configuration.unreachableBackoff.seconds) }
            return unanswered(uri, "the OCSP responder \(uri) could not be reached: \(error)", observation, log: true)
        }
        guard let summary = OCSPMessages.summary(ofResponse: bytes) else {
            return unanswered(uri, "the OCSP responder \(uri) gave no usable answer", observation, log: true)
        }
        observation?.record(summary)
        if let key, !summary.hasNonce, let next = summary.nextUpdate, next > now {
            state.withLockedValue { state in
                if state.answers.count >= Self.cacheLimit { state.answers.removeAll() }
                state.answers[key] = Cached(bytes: bytes, summary: summary, until: next)
            }
        }
        return .response(bytes)
    }

    private func unanswered(_ uri: String, _ message: String, _ observation: Observation?, log: Bool) -> OCSPRequesterQueryResult {
        observation?.seen.withLockedValue { $0.unanswered = true }
        if log {
            warn(message + (configuration.hardFail ? "; refusing (hard-fail)" : "; accepting without a revocation check (soft-fail)"))
        }
        return configuration.hardFail ? .terminalError(Failure(description: message)) : .nonTerminalError(Failure(description: message))
    }
}

extension Duration {
    var seconds: Double {
        let (s, attoseconds) = components
        return Double(s) + Double(attoseconds) / 1e18
    }
}
