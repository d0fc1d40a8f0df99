import Foundation
import IAPProtocol
import JSONRPC
import NIOConcurrencyHelpers
import Receipts
import X509

/// The simulator's OCSP responder (`POST /ocsp` on its HTTP port): answers about the leaves and intermediates of
/// its two chains, signed by each certificate's issuer, `good` until `sim.revokeCertificate` revokes one, `unknown`
/// for serial numbers it never issued, `unauthorized` for issuers it does not know. Answers are valid for
/// `validity` (their `nextUpdate`), carry no nonce (like Apple's pre-signed answers), so a verifier may cache them.
/// Revocations are kept in `sim-pki/revoked.json` and survive restarts.
public final class SimulatorOCSPResponder: Sendable {
    /// An issuer this responder signs for, and the certificates it issued (by name, for `revoke`).
    struct Issuer: Sendable {
        let certificate: Certificate
        let key: OCSPMessages.SigningKey
        let issued: [String: Certificate]
    }

    struct Revocation: Codable, Sendable {
        var name: String
        var revokedAtMs: Int64
    }

    private let issuers: [Issuer]
    private let file: URL
    /// By serial number (hex).
    private let revoked: NIOLockedValueBox<[String: Revocation]>
    private let answered = NIOLockedValueBox(0)
    public let validity: TimeInterval
    /// The simulator's clock (the wall clock, or a test's), unshifted by `advanceClock`.
    private let now: @Sendable () -> Date

    init(pki: SimulatorPKI, directory: URL, validity: TimeInterval = 3_600, now: @escaping @Sendable () -> Date) {
        self.now = now
        var issuers: [Issuer] = []
        if let key = pki.signedPayloads.intermediateKey {
            issuers.append(.init(certificate: pki.signedPayloads.intermediate, key: .p256(key), issued: ["jws-leaf": pki.signedPayloads.leaf]))
        }
        if let key = pki.signedPayloads.rootKey {
            issuers.append(
                .init(certificate: pki.signedPayloads.root, key: .p256(key), issued: ["jws-intermediate": pki.signedPayloads.intermediate]))
        }
        issuers.append(
            .init(certificate: pki.receipts.intermediate, key: .rsa(pki.receipts.intermediateKey), issued: ["receipt-leaf": pki.receipts.leaf]))
        if let key = pki.receipts.rootKey {
            issuers.append(.init(certificate: pki.receipts.root, key: .rsa(key), issued: ["receipt-intermediate": pki.receipts.intermediate]))
        }
        self.issuers = issuers
        self.file = directory.appendingPathComponent("sim-pki/revoked.json")
        let saved = (try? Data(contentsOf: file)).flatMap { try? JSONDecoder().decode([String: Revocation].self, from: $0) }
        self.revoked = NIOLockedValueBox(saved ?? [:])
        self.validity = validity
    }

    /// Requests answered so far (each is one responder hit).
    public var requestCount: Int { answered.withLockedValue { $0 } }

    /// A serial number's hex, without the leading zero bytes DER adds to keep an INTEGER positive.
    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        bytes.drop { $0 == 0 }.map { String(format: "%02x", $0) }.joined()
    }

    /// The DER response to a DER request.
    public func respond(to request: [UInt8]) -> [UInt8] {
        answered.withLockedValue { $0 += 1 }
        let now = self.now()
        guard let certID = OCSPMessages.certID(inRequest: request) else { return OCSPMessages.failure(status: 1) }  // malformedRequest
        guard let issuer = issuers.first(where: { certID.isIssued(by: $0.certificate) }) else {
            return OCSPMessages.failure(status: 6)  // unauthorized: not an issuer of ours
        }
        let serial = Self.hex(certID.serialNumber)
        let ours = issuer.issued.values.contains { Self.hex($0.serialNumber.bytes) == serial }
        let revocation = revoked.withLockedValue { $0[serial] }
        let status: OCSPMessages.CertStatus = !ours ? .unknown : revocation == nil ? .good : .revoked
        do {
            return try OCSPMessages.response(
                certID: certID, status: status, revokedAt: revocation.map { Date(timeIntervalSince1970: Double($0.revokedAtMs) / 1000) },
                producedAt: now, thisUpdate: now, nextUpdate: now.addingTimeInterval(validity), responder: issuer.certificate,
                key: issuer.key)
        } catch {
            return OCSPMessages.failure(status: 2)  // internalError
        }
    }

    /// Revokes one of the simulator's certificates (`jws-leaf`, `jws-intermediate`, `receipt-leaf`,
    /// `receipt-intermediate`); answers its serial number. Revoking twice keeps the first date.
    public func revoke(_ name: String, nowMs: Int64) throws(RPCError) -> String {
        guard let certificate = issuers.lazy.compactMap({ $0.issued[name] }).first else {
            let known = issuers.flatMap { $0.issued.keys }.sorted().joined(separator: ", ")
            throw RPCError.invalidParams(
                "no certificate \(name) this simulator answers OCSP for (known: \(known))", field: "certificate", reason: "unknownCertificate")
        }
        let serial = Self.hex(certificate.serialNumber.bytes)
        let all = revoked.withLockedValue { table -> [String: Revocation] in
            if table[serial] == nil { table[serial] = Revocation(name: name, revokedAtMs: nowMs) }
            return table
        }
        do {
            try JSONEncoder().encode(all).write(to: file, options: .atomic)
        } catch {
            throw RPCError.internalError()
        }
        return serial
    }
}
