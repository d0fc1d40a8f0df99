import Crypto
import Foundation
import JSONRPC
import NIOConcurrencyHelpers
import SwiftASN1
@_spi(FixedExpiryValidationTime) import X509

/// Why a StoreKit 2 signed payload (JWS) was refused.
public enum JWSFailure: String, Error, Sendable, Equatable {
    /// Not three base64url parts, unreadable JSON, oversized.
    case malformed
    /// `alg` other than ES256 (`none`, HS256, ES384, ...).
    case wrongAlgorithm
    /// x5c missing or not exactly three certificates.
    case invalidChain
    /// The x5c root is not one of the pinned roots, a link does not verify, a marker is missing, or a
    /// certificate was not valid at `signedDate`.
    case untrustedChain
    case signatureInvalid
    /// A certificate of the chain is revoked (OCSP).
    case revoked
    /// Revocation is checked hard-fail and a responder could not be asked: retryable (21005, "try again").
    case revocationUnknown

    public var status: Int {
        switch self {
        case .malformed: 21002
        case .revocationUnknown: 21005
        default: 21003
        }
    }
}

/// Verifies compact JWS from StoreKit 2 and App Store Server Notifications v2 (docs/receipts.md, "StoreKit 2 signed data").
///
/// The chain is built as Apple's server libraries build it: the leaf and the intermediate come from `x5c`
/// and must chain up to one of the configured roots; the last `x5c` entry is only a hint and is never
/// trusted itself (a test root given with `--trust-anchor` works whatever the signer put there). Apple's
/// marker extensions are required on the leaf and the intermediate.
///
/// With `allowXcode` (development only), a JWS signed by Xcode's StoreKit testing is also accepted: one
/// self-signed P-256 certificate in `x5c` (each Mac makes its own, so it cannot be pinned), the signature
/// checked against it, and only when the payload says its environment is Xcode (`Xcode` or `LocalTesting`):
/// such a purchase is worth what sandbox purchases are worth, never production value.
public final class SignedPayloadVerifier: Sendable {
    private let roots: [Certificate]
    private let allowXcode: Bool
    private let cache = TrustedChainCache()
    private let revocation: RevocationChecker?
    public static let maxBytes = 64 * 1024

    /// `revocation`: online checks (OCSP) of the chain's certificates; nil checks none.
    public init(roots: [Certificate], allowXcode: Bool = false, revocation: RevocationChecker? = nil) {
        self.roots = roots
        self.allowXcode = allowXcode
        self.revocation = revocation
    }

    struct Header: Decodable {
        let alg: String
        let x5c: [String]?
    }

    /// A JWS header, decoded once: its algorithm and its `x5c` chain, parsed, with the chain's cache key.
    /// Apple signs with a handful of leaves, so nearly every JWS repeats a header already seen (a few KB of
    /// base64 holding three certificates); decoding and parsing it each time was a large share of a verify.
    private struct ParsedHeader: Sendable {
        let alg: String
        /// Nil when `x5c` is missing or holds neither three certificates nor (Xcode's) one.
        let ders: [[UInt8]]?
        let chain: [Certificate]
        let chainKey: Data
    }

    /// Keyed by the header's base64url text; bounded (cleared when full: headers are few in practice).
    private let headers = NIOLockedValueBox<[Data: ParsedHeader]>([:])
    private static let headerCacheLimit = 256

    private func header(_ part: ArraySlice<UInt8>) -> ParsedHeader? {
        let key = Data(part)
        if let cached = headers.withLockedValue({ $0[key] }) { return cached }
        guard let headerBytes = Self.base64URL(part), let header = try? JSONDecoder().decode(Header.self, from: Data(headerBytes)) else {
            return nil
        }
        var parsed = ParsedHeader(alg: header.alg, ders: nil, chain: [], chainKey: Data())
        if let x5c = header.x5c, x5c.count == 3 || x5c.count == 1 {
            let ders = x5c.compactMap { Data(base64Encoded: $0).map { Array($0) } }
            guard ders.count == x5c.count, let chain = try? ders.map({ try cache.certificate($0) }) else { return nil }
            var hasher = SHA256()
            for der in ders { hasher.update(data: der) }
            parsed = ParsedHeader(alg: header.alg, ders: ders, chain: chain, chainKey: Data(hasher.finalize()))
        }
        headers.withLockedValue { cache in
            if cache.count >= Self.headerCacheLimit { cache.removeAll() }
            cache[key] = parsed
        }
        return parsed
    }

    /// The payload's JSON bytes, once everything checks out.
    public func verify(_ jws: String) async -> Result<[UInt8], JWSFailure> {
        await verifyParsed(jws, xcode: true).map(\.bytes)
    }

    /// The payload, parsed (a JSON object), once everything checks out. `xcode: false` refuses Xcode's
    /// self-signed form even where `allowXcode` accepts it for purchases (notifications: Xcode sends none).
    public func verifiedObject(_ jws: String, xcode: Bool = true) async -> Result<JSONValue, JWSFailure> {
        await verifyParsed(jws, xcode: xcode).map(\.object)
    }

    /// `verifiedObject`'s answer when it needs nothing but memory and CPU: the chain was validated before and
    /// its revocation recheck is not due. Nil when the chain must be validated (which may ask an OCSP
    /// responder): then call `verifiedObject`. Never waits, so a server can answer on its event loop.
    public func verifiedObjectFromMemory(_ jws: String, xcode: Bool = true) -> Result<JSONValue, JWSFailure>? {
        check(jws, xcode: xcode) { cache.cachedVerdict($0, revocation: revocation) }?.map(\.object)
    }

    private func verifyParsed(_ jws: String, xcode: Bool) async -> Result<(bytes: [UInt8], object: JSONValue), JWSFailure> {
        // Leaf and intermediate from x5c, up to a configured root; x5c[2] is not trusted (a hint only).
        await cache.checked(roots: roots, revocation: revocation) { chain in check(jws, xcode: xcode, chain: chain) }
            ?? .failure(.untrustedChain)
    }

    /// Every check of a JWS, with the chain's verdict from `chain`; nil when `chain` has none (it must be
    /// validated first). `xcode`: whether Xcode's one self-signed certificate may sign it (with `allowXcode`).
    private func check(
        _ jws: String, xcode: Bool, chain: (TrustedChainCache.Question) -> TrustedChainCache.Verdict?
    ) -> Result<(bytes: [UInt8], object: JSONValue), JWSFailure>? {
        guard jws.utf8.count <= Self.maxBytes else { return .failure(.malformed) }
        let bytes = Array(jws.utf8)
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, let header = header(parts[0]), let payload = Self.base64URL(parts[1]),
            let signatureBytes = Self.base64URL(parts[2])
        else { return .failure(.malformed) }
        guard header.alg == "ES256" else { return .failure(.wrongAlgorithm) }
        guard let ders = header.ders, ders.count == 3 || (allowXcode && xcode) else { return .failure(.invalidChain) }
        let certificates = header.chain
        guard let key = P256.Signing.PublicKey(certificates[0].publicKey),
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes)
        else { return .failure(.signatureInvalid) }
        let signingInput = bytes[..<(parts[0].count + 1 + parts[1].count)]
        guard key.isValidSignature(signature, for: SHA256.hash(data: signingInput)) else { return .failure(.signatureInvalid) }
        // The time the chain is judged at: when Apple signed it (`signedDate`; an app transaction's `receiptCreationDate`).
        guard let object = try? JSONValue(parsing: payload), object.objectValue != nil,
            let signedDate = object["signedDate"]?.millisecondsValue ?? object["receiptCreationDate"]?.millisecondsValue
        else {
            return .failure(.malformed)
        }
        if ders.count == 1 {
            // Xcode's StoreKit testing: its own self-signed certificate, for Xcode-environment payloads only.
            // Every environment it names (`environment`; an app transaction's `receiptType`) must be Xcode.
            let named = [object["environment"], object["receiptType"]].compactMap { $0 }
            guard !named.isEmpty, named.allSatisfy({ PurchaseEnvironment.fromSignedPayload($0.stringValue) == "Xcode" }),
                Self.isSelfSigned(certificates[0])
            else {
                return .failure(.untrustedChain)
            }
            return .success((payload, object))
        }
        let at = Date(timeIntervalSince1970: Double(signedDate) / 1000)
        let question = TrustedChainCache.Question(
            leaf: certificates[0], intermediates: [certificates[1]], ders: ders, key: header.chainKey, at: at)
        switch chain(question) {
        case nil: return nil
        case .trusted: return .success((payload, object))
        case .untrusted: return .failure(.untrustedChain)
        case .revoked: return .failure(.revoked)
        case .revocationUnknown: return .failure(.revocationUnknown)
        }
    }

    /// A certificate issued by itself and signed with its own key.
    static func isSelfSigned(_ certificate: Certificate) -> Bool {
        certificate.issuer == certificate.subject && certificate.publicKey.isValidSignature(certificate.signature, for: certificate)
    }

    /// The payload bytes of a compact JWS WITHOUT verifying anything (bounded like `verify`): only for
    /// echoing the ids a refused JWS claims back to its sender. Never act on them.
    public static func unverifiedPayload(_ jws: String) -> [UInt8]? {
        guard jws.utf8.count <= maxBytes else { return nil }
        let parts = Array(jws.utf8).split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        return base64URL(parts[1])
    }

    /// Unpadded base64url (RFC 4648 section 5) to bytes, straight from the UTF-8 (no string copies);
    /// nil on any character outside the alphabet or an impossible length.
    static func base64URL(_ part: ArraySlice<UInt8>) -> [UInt8]? {
        guard part.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(part.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for c in part {
            let v: UInt8
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): v = c - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): v = c - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): v = c - UInt8(ascii: "0") + 52
            case UInt8(ascii: "-"): v = 62
            case UInt8(ascii: "_"): v = 63
            default: return nil
            }
            accumulator = (accumulator << 6) | UInt32(v)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
            }
        }
        return out
    }
}

/// An Apple-shaped ECDSA P-256 PKI for signing StoreKit 2 JWS: root, marked intermediate, marked leaf.
public struct JWSSigningPKI: Sendable {
    public let root: Certificate
    public let intermediate: Certificate
    public let leaf: Certificate
    public let leafKey: P256.Signing.PrivateKey
    /// The issuers' keys, kept where the PKI answers OCSP about its certificates (the simulator); nil otherwise.
    public let intermediateKey: P256.Signing.PrivateKey?
    public let rootKey: P256.Signing.PrivateKey?

    public init(
        root: Certificate, intermediate: Certificate, leaf: Certificate, leafKey: P256.Signing.PrivateKey,
        intermediateKey: P256.Signing.PrivateKey? = nil, rootKey: P256.Signing.PrivateKey? = nil
    ) {
        self.root = root
        self.intermediate = intermediate
        self.leaf = leaf
        self.leafKey = leafKey
        self.intermediateKey = intermediateKey
        self.rootKey = rootKey
    }

    /// A chain shaped like Apple's (Apple Root CA - G3, WWDR G6, the App Store's signing leaf), field by field, so
    /// that OpenSSL's strict verification (Apple's own libraries use `X509_STRICT`) accepts it: names CN, OU, O, C;
    /// Subject and Authority Key Identifiers (SHA-1 of the key) on every link; critical basic constraints and key
    /// usages; the leaf's certificate policy; Apple's marker extensions. `ocspURL`: the responder the leaf's and the
    /// intermediate's Authority Information Access name, as Apple's name theirs. Unlike Apple's two-year leaves,
    /// the validity is long: the simulator's clock can be moved on by years.
    public static func generate(
        name: String = "Simulated", notBefore: Date = Date(timeIntervalSince1970: 1_577_836_800),
        notAfter: Date = Date(timeIntervalSince1970: 2_524_608_000),
        markers: Bool = true, ocspURL: String? = nil
    ) throws -> JWSSigningPKI {
        let rootKey = P256.Signing.PrivateKey()
        let intermediateKey = P256.Signing.PrivateKey()
        let leafKey = P256.Signing.PrivateKey()
        func distinguished(_ commonName: String, _ unit: String) throws -> DistinguishedName {
            try DistinguishedName {
                CommonName(commonName)
                OrganizationalUnitName(unit)
                OrganizationName("\(name) Inc.")
                CountryName("US")
            }
        }
        let rootName = try distinguished("\(name) Root CA - G3", "\(name) Certification Authority")
        let intermediateName = try distinguished("\(name) Worldwide Developer Relations Certification Authority", "G6")
        let leafName = try distinguished("\(name) ECC Mac App Store and iTunes Store Receipt Signing", "\(name) Worldwide Developer Relations")
        let rootSKI = SubjectKeyIdentifier(hash: .init(rootKey.publicKey))
        let intermediateSKI = SubjectKeyIdentifier(hash: .init(intermediateKey.publicKey))
        let root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey), notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                rootSKI
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            }, issuerPrivateKey: .init(rootKey))
        let intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey), notValidBefore: notBefore,
            notValidAfter: notAfter, issuer: rootName, subject: intermediateName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                AuthorityKeyIdentifier(keyIdentifier: rootSKI.keyIdentifier)
                if let ocspURL { AuthorityInformationAccess([.init(method: .ocspServer, location: .uniformResourceIdentifier(ocspURL))]) }
                intermediateSKI
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                if markers { Certificate.Extension(oid: AppleMarkers.wwdrIntermediate, critical: false, value: [0x05, 0x00]) }
            }, issuerPrivateKey: .init(rootKey))
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: intermediateName, subject: leafName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                AuthorityKeyIdentifier(keyIdentifier: intermediateSKI.keyIdentifier)
                if let ocspURL { AuthorityInformationAccess([.init(method: .ocspServer, location: .uniformResourceIdentifier(ocspURL))]) }
                try AppleMarkers.signingLeafPolicy()
                SubjectKeyIdentifier(hash: .init(leafKey.publicKey))
                Critical(KeyUsage(digitalSignature: true))
                if markers { Certificate.Extension(oid: AppleMarkers.receiptSigning, critical: false, value: [0x05, 0x00]) }
            }, issuerPrivateKey: .init(intermediateKey))
        return JWSSigningPKI(
            root: root, intermediate: intermediate, leaf: leaf, leafKey: leafKey, intermediateKey: intermediateKey, rootKey: rootKey)
    }

    /// What Xcode's StoreKit testing signs with: one self-signed P-256 certificate ("StoreKit Testing in
    /// Xcode"; each Mac makes its own), no chain. `sign(payload:x5c: [pki.leaf])` makes its one-entry `x5c`.
    public static func xcodeStoreKitTesting(
        notBefore: Date = Date(timeIntervalSince1970: 1_577_836_800), notAfter: Date = Date(timeIntervalSince1970: 2_524_608_000)
    ) throws -> JWSSigningPKI {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName { CommonName("StoreKit Testing in Xcode") }
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: notBefore, notValidAfter: notAfter,
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions { Critical(KeyUsage(digitalSignature: true)) }, issuerPrivateKey: .init(key))
        return JWSSigningPKI(root: certificate, intermediate: certificate, leaf: certificate, leafKey: key)
    }

    /// A compact JWS of `payload` (JSON bytes) with `alg: ES256` and x5c [leaf, intermediate, root].
    public func sign(payload: [UInt8], alg: String = "ES256", x5c chain: [Certificate]? = nil) throws -> String {
        let certs = try (chain ?? [leaf, intermediate, root]).map { cert -> String in
            var s = DER.Serializer()
            try s.serialize(cert)
            return Data(s.serializedBytes).base64EncodedString()
        }
        let header = try JSONSerialization.data(withJSONObject: ["alg": alg, "x5c": certs])
        let input = Self.base64URL(Array(header)) + "." + Self.base64URL(payload)
        let signature = try leafKey.signature(for: SHA256.hash(data: Array(input.utf8)))
        return input + "." + Self.base64URL(Array(signature.rawRepresentation))
    }

    /// Unpadded base64url (RFC 4648 section 5), written byte by byte (Foundation's base64 plus three
    /// `replacingOccurrences` passes was a sixth of the CPU of signing an offer).
    public static func base64URL(_ bytes: [UInt8]) -> String {
        let alphabet: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        return alphabet.withUTF8Buffer { table in
            String(unsafeUninitializedCapacity: (bytes.count * 4 + 2) / 3) { out in
                var o = 0
                var i = 0
                while i + 3 <= bytes.count {
                    let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
                    out[o] = table[Int(n >> 18 & 63)]
                    out[o + 1] = table[Int(n >> 12 & 63)]
                    out[o + 2] = table[Int(n >> 6 & 63)]
                    out[o + 3] = table[Int(n & 63)]
                    o += 4
                    i += 3
                }
                let rest = bytes.count - i
                if rest > 0 {
                    let n = UInt32(bytes[i]) << 16 | (rest == 2 ? UInt32(bytes[i + 1]) << 8 : 0)
                    out[o] = table[Int(n >> 18 & 63)]
                    out[o + 1] = table[Int(n >> 12 & 63)]
                    o += 2
                    if rest == 2 {
                        out[o] = table[Int(n >> 6 & 63)]
                        o += 1
                    }
                }
                return o
            }
        }
    }
}
