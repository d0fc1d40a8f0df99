import Crypto
import CryptoExtras
import Foundation
import NIOConcurrencyHelpers
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// Why a receipt was refused, with Apple's verifyReceipt status code for it.
public enum ReceiptFailure: String, Error, Sendable, Equatable {
    /// Not base64, not PKCS#7, truncated, over the limits, or a payload that does not decode.
    case malformed
    case signatureInvalid
    case untrustedChain
    case bundleMismatch
    case deviceMismatch
    case xcodeNotAllowed
    case unsupportedAlgorithm
    /// A `receipt_type` that is none of Apple's (so no environment can be given to its purchases).
    case unknownEnvironment
    /// A certificate of the chain is revoked (OCSP).
    case revoked
    /// Revocation is checked hard-fail and a responder could not be asked: retryable.
    case revocationUnknown

    /// verifyReceipt's status for this failure: 21002 for unreadable data, 21005 (try again) when the
    /// revocation status could not be learnt, 21003 for anything that could not be authenticated.
    public var status: Int {
        switch self {
        case .malformed, .unknownEnvironment: 21002
        case .revocationUnknown: 21005
        default: 21003
        }
    }
}

/// The environment of a purchase, from an app receipt's `receipt_type` or a JWS payload's
/// `environment` (docs/receipts.md, "Environments"). Unknown values have none: they are refused, never defaulted.
public enum PurchaseEnvironment {
    /// `Production`, `Sandbox` or `Xcode`.
    public static func fromReceiptType(_ type: String?) -> String? {
        switch type {
        case "Production", "ProductionVPP": return "Production"
        case "ProductionSandbox", "ProductionVPPSandbox": return "Sandbox"
        case "Xcode": return "Xcode"
        default: return nil
        }
    }

    /// A JWS `environment` (`LocalTesting` is Xcode's StoreKit testing).
    public static func fromSignedPayload(_ value: String?) -> String? {
        switch value {
        case "Production": return "Production"
        case "Sandbox": return "Sandbox"
        case "Xcode", "LocalTesting": return "Xcode"
        default: return nil
        }
    }
}

/// The certificates a verifier trusts.
public struct ReceiptTrust: Sendable {
    /// Roots for Apple-signed receipts (and any added with `--trust-anchor`).
    public var roots: [Certificate]
    /// The exact StoreKit test certificate accepted for `Xcode` receipts; nil refuses them.
    public var xcodeCertificate: Certificate?

    public init(roots: [Certificate], xcodeCertificate: Certificate? = nil) {
        self.roots = roots
        self.xcodeCertificate = xcodeCertificate
    }

    /// Parses DER or PEM certificate files' contents.
    public static func certificate(from bytes: [UInt8]) throws -> Certificate {
        if let text = String(validating: bytes, as: UTF8.self), text.contains("-----BEGIN CERTIFICATE-----") {
            return try Certificate(pemEncoded: text)
        }
        return try Certificate(derEncoded: bytes)
    }
}

/// Apple's marker extensions (docs/receipts.md, "Verifying a receipt"): a receipt-signing leaf and a WWDR intermediate.
public enum AppleMarkers {
    public static let receiptSigning = try! ASN1ObjectIdentifier(dotRepresentation: "1.2.840.113635.100.6.11.1")
    public static let wwdrIntermediate = try! ASN1ObjectIdentifier(dotRepresentation: "1.2.840.113635.100.6.2.1")

    /// The certificate policy Apple's App Store signing leaves carry (1.2.840.113635.100.5.6.1, with Apple's CPS),
    /// non-critical: certificatePolicies { PolicyInformation { id, { PolicyQualifierInfo { id-qt-cps, IA5String } } } }.
    public static func signingLeafPolicy(cps: String = "http://www.apple.com/certificateauthority/") throws -> Certificate.Extension {
        var der = DER.Serializer()
        try der.appendConstructedNode(identifier: .sequence) { policies in
            try policies.appendConstructedNode(identifier: .sequence) { information in
                try information.serialize(try ASN1ObjectIdentifier(dotRepresentation: "1.2.840.113635.100.5.6.1"))
                try information.appendConstructedNode(identifier: .sequence) { qualifiers in
                    try qualifiers.appendConstructedNode(identifier: .sequence) { qualifier in
                        try qualifier.serialize(try ASN1ObjectIdentifier(dotRepresentation: "1.3.6.1.5.5.7.2.1"))
                        try qualifier.serialize(try ASN1IA5String(cps))
                    }
                }
            }
        }
        return Certificate.Extension(oid: [2, 5, 29, 32], critical: false, value: der.serializedBytes[...])
    }
}

/// The chain must be leaf (receipt-signing marker) <- intermediate (WWDR marker) <- root.
struct AppleMarkerPolicy: VerifierPolicy {
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = [AppleMarkers.receiptSigning, AppleMarkers.wwdrIntermediate]

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) -> PolicyEvaluationResult {
        guard chain.count == 3 else {
            return .failsToMeetPolicy(reason: "expected leaf, intermediate and root; got \(chain.count) certificates")
        }
        guard chain.leaf.extensions[oid: AppleMarkers.receiptSigning] != nil else {
            return .failsToMeetPolicy(reason: "the signing certificate lacks Apple's receipt-signing marker")
        }
        guard chain[1].extensions[oid: AppleMarkers.wwdrIntermediate] != nil else {
            return .failsToMeetPolicy(reason: "the intermediate lacks Apple's WWDR marker")
        }
        return .meetsPolicy
    }
}

public struct VerifiedReceipt: Sendable {
    public let receipt: Receipt
    /// `Production`, `Sandbox` or `Xcode`.
    public let environment: String
}

/// Decides whether an app receipt is real, locally: container, signature, chain to a pinned root at
/// the receipt's creation date, Apple's markers, bundle id, and optionally the device.
///
/// Chain results are cached per (leaf, intermediate) with the window in which they hold, so a busy
/// server does one RSA verification per receipt (the payload signature), not three.
public final class ReceiptVerifier: Sendable {
    private let trust: ReceiptTrust
    private let limits: ASN1Limits
    private let cache = TrustedChainCache()
    private let revocation: RevocationChecker?

    /// `revocation`: online checks (OCSP) of the chain's certificates; nil checks none.
    public init(trust: ReceiptTrust, limits: ASN1Limits = .init(), revocation: RevocationChecker? = nil) {
        self.trust = trust
        self.limits = limits
        self.revocation = revocation
    }

    public struct Options: Sendable {
        /// Accepted bundle ids; empty accepts any.
        public var bundleIds: Set<String> = []
        /// iOS: identifierForVendor (UUID string); macOS: the MAC address as hex or base64.
        public var deviceIdentifier: String?
        public init(bundleIds: Set<String> = [], deviceIdentifier: String? = nil) {
            self.bundleIds = bundleIds
            self.deviceIdentifier = deviceIdentifier
        }
    }

    public func verify(base64 text: String, options: Options) async -> Result<VerifiedReceipt, ReceiptFailure> {
        guard let bytes = Self.receiptBytes(base64: text) else { return .failure(.malformed) }
        return await verify(bytes, options: options)
    }

    /// A receipt's bytes from its base64 text, tolerating line breaks and other characters outside the
    /// alphabet (as Apple's endpoint does); nil when nothing decodes. Plain base64 takes Foundation's fast
    /// decoder; only text with other characters in it takes the tolerant (slower) one.
    static func receiptBytes(base64 text: String) -> [UInt8]? {
        guard let data = Data(base64Encoded: text) ?? Data(base64Encoded: text, options: .ignoreUnknownCharacters), !data.isEmpty
        else { return nil }
        return Array(data)
    }

    public func verify(_ bytes: [UInt8], options: Options) async -> Result<VerifiedReceipt, ReceiptFailure> {
        await cache.checked(roots: trust.roots, revocation: revocation) { chain in check(bytes, options: options, chain: chain) }
            ?? .failure(.untrustedChain)
    }

    /// `verify`'s answer when it needs nothing but memory and CPU: the chain was validated before and its
    /// revocation recheck is not due. Nil when the chain must be validated (which may ask an OCSP responder):
    /// then call `verify`. Never waits, so a server can answer on its event loop.
    public func verifyFromMemory(base64 text: String, options: Options) -> Result<VerifiedReceipt, ReceiptFailure>? {
        guard let bytes = Self.receiptBytes(base64: text) else { return .failure(.malformed) }
        return check(bytes, options: options) { cache.cachedVerdict($0, revocation: revocation) }
    }

    /// Every check of a receipt, with the chain's verdict from `chain`; nil when `chain` has none (it must be
    /// validated first).
    private func check(
        _ bytes: [UInt8], options: Options, chain: (TrustedChainCache.Question) -> TrustedChainCache.Verdict?
    ) -> Result<VerifiedReceipt, ReceiptFailure>? {
        let container: ReceiptContainer
        let receipt: Receipt
        do {
            container = try ReceiptContainer.parse(bytes, limits: limits)
            receipt = try Receipt(payload: container.payload)
        } catch {
            return .failure(.malformed)
        }
        let certificates: [Certificate]
        do {
            certificates = try container.certificates.map(cache.certificate)
        } catch {
            return .failure(.malformed)
        }
        let environment: String
        if receipt.receiptType == "Xcode" {
            guard let pinned = trust.xcodeCertificate else { return .failure(.xcodeNotAllowed) }
            // Exactly the pinned StoreKit test certificate; Apple's markers do not apply to it.
            guard certificates.count == 1, certificates[0] == pinned else { return .failure(.untrustedChain) }
            if let failure = Self.checkSignature(container, key: pinned.publicKey) { return .failure(failure) }
            environment = "Xcode"
        } else {
            guard let leaf = certificates.first(where: { $0.extensions[oid: AppleMarkers.receiptSigning] != nil }) else {
                return .failure(.untrustedChain)
            }
            if let failure = Self.checkSignature(container, key: leaf.publicKey) { return .failure(failure) }
            guard let created = receipt.creationDateMs else { return .failure(.malformed) }
            let at = Date(timeIntervalSince1970: Double(created) / 1000)
            switch chain(.init(leaf: leaf, intermediates: certificates.filter { $0 != leaf }, ders: container.certificates, at: at)) {
            case nil: return nil
            case .trusted: break
            case .untrusted: return .failure(.untrustedChain)
            case .revoked: return .failure(.revoked)
            case .revocationUnknown: return .failure(.revocationUnknown)
            }
            guard let known = PurchaseEnvironment.fromReceiptType(receipt.receiptType), known != "Xcode" else {
                return .failure(.unknownEnvironment)
            }
            environment = known
        }
        if !options.bundleIds.isEmpty && !options.bundleIds.contains(receipt.bundleId) {
            return .failure(.bundleMismatch)
        }
        if let device = options.deviceIdentifier {
            guard let deviceBytes = Self.deviceBytes(device),
                Array(Insecure.SHA1.hash(data: deviceBytes + receipt.opaqueValue + receipt.bundleIdDER)) == receipt.sha1Hash
            else { return .failure(.deviceMismatch) }
        }
        return .success(VerifiedReceipt(receipt: receipt, environment: environment))
    }

    /// The signature over the payload (or over the signed attributes, which must then carry the
    /// payload's digest). RSA PKCS#1 v1.5 with SHA-1 or SHA-256.
    static func checkSignature(_ container: ReceiptContainer, key: Certificate.PublicKey) -> ReceiptFailure? {
        guard let rsa = _RSA.Signing.PublicKey(key) else { return .unsupportedAlgorithm }
        let signer = container.signer
        let signature = _RSA.Signing.RSASignature(rawRepresentation: signer.signature)
        let known: Set = ["1.2.840.113549.1.1.1", "1.2.840.113549.1.1.5", "1.2.840.113549.1.1.11"]
        guard known.contains(signer.signatureAlgorithm) else { return .unsupportedAlgorithm }
        func digestMatches(_ data: [UInt8]) -> Bool? {
            switch signer.digestAlgorithm {
            case "1.3.14.3.2.26": return rsa.isValidSignature(signature, for: Insecure.SHA1.hash(data: data), padding: .insecurePKCS1v1_5)
            case "2.16.840.1.101.3.4.2.1": return rsa.isValidSignature(signature, for: SHA256.hash(data: data), padding: .insecurePKCS1v1_5)
            default: return nil
            }
        }
        if let attributes = signer.signedAttributes {
            guard let expected = signer.messageDigest else { return .signatureInvalid }
            let actual: [UInt8]
            switch signer.digestAlgorithm {
            case "1.3.14.3.2.26": actual = Array(Insecure.SHA1.hash(data: container.payload))
            case "2.16.840.1.101.3.4.2.1": actual = Array(SHA256.hash(data: container.payload))
            default: return .unsupportedAlgorithm
            }
            guard actual == expected else { return .signatureInvalid }
            guard let ok = digestMatches(attributes) else { return .unsupportedAlgorithm }
            return ok ? nil : .signatureInvalid
        }
        guard let ok = digestMatches(container.payload) else { return .unsupportedAlgorithm }
        return ok ? nil : .signatureInvalid
    }

    /// UUID string -> its 16 bytes; otherwise hex, otherwise base64 (a MAC address).
    public static func deviceBytes(_ text: String) -> [UInt8]? {
        if let uuid = UUID(uuidString: text) {
            return withUnsafeBytes(of: uuid.uuid) { Array($0) }
        }
        let hex = text.replacingOccurrences(of: ":", with: "")
        if hex.count % 2 == 0, !hex.isEmpty, hex.allSatisfy(\.isHexDigit) {
            var out: [UInt8] = []
            var i = hex.startIndex
            while i < hex.endIndex {
                let j = hex.index(i, offsetBy: 2)
                out.append(UInt8(hex[i..<j], radix: 16)!)
                i = j
            }
            return out
        }
        return Data(base64Encoded: text).map { Array($0) }
    }
}
