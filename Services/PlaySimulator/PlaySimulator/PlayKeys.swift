import Crypto
import CryptoExtras
import Foundation
import ServiceSupport
import X509

/// An RSA key the simulator signs with as Google does (RS256): the service account's key it hands out, and the
/// key of its Pub/Sub push tokens. 2048 bits, kept as PKCS#8 PEM (0600) in the data directory; its id is the
/// SHA-1 of the public key in hex (40 characters, the form of Google's `private_key_id` and certificate ids).
struct PlayRSAKey: Sendable {
    let id: String
    let key: _RSA.Signing.PrivateKey

    static func loadOrCreate(directory: URL, name: String) throws -> PlayRSAKey {
        try PrivateFiles.directory(directory)
        let file = directory.appendingPathComponent("\(name).pem")
        let key: _RSA.Signing.PrivateKey
        if let pem = try? String(contentsOf: file, encoding: .utf8) {
            key = try _RSA.Signing.PrivateKey(pemRepresentation: pem)
        } else {
            key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            try PrivateFiles.writeSecret(Array(key.pkcs8PEMRepresentation.utf8), to: file)
        }
        let id = Insecure.SHA1.hash(data: key.publicKey.derRepresentation).map { String(format: "%02x", $0) }.joined()
        return PlayRSAKey(id: id, key: key)
    }

    /// The account's numeric unique id, 21 digits as Google's (`client_id`, and `sub`/`azp` of its tokens), from the key id.
    var numericId: String {
        let digits = id.compactMap(\.hexDigitValue).map { String($0 % 10) }.joined()
        return "1" + digits.prefix(20)
    }

    /// A compact JWS: header `{alg: RS256, kid, typ: JWT}`, the claims as given.
    func sign(_ claims: [String: Any]) throws -> String {
        let header = try CompactJWT.encode(["alg": "RS256", "kid": id, "typ": "JWT"])
        let payload = try CompactJWT.encode(claims)
        let input = "\(header).\(payload)"
        let signature = try key.signature(for: Data(input.utf8), padding: .insecurePKCS1v1_5)
        return "\(input).\(CompactJWT.base64url(signature.rawRepresentation))"
    }

    /// True when `token` is a compact RS256 JWS this key signed (any `kid`: the caller checks it).
    func verifies(_ token: CompactJWT) -> Bool {
        guard token.header["alg"] as? String == "RS256" else { return false }
        return key.publicKey.isValidSignature(
            _RSA.Signing.RSASignature(rawRepresentation: token.signature), for: token.signingInput, padding: .insecurePKCS1v1_5)
    }

    /// The public key as one entry of a JSON Web Key Set (Google's `oauth2/v3/certs`).
    func jwk() throws -> [String: String] {
        let primitives = try key.publicKey.getKeyPrimitives()
        return [
            "kty": "RSA", "alg": "RS256", "use": "sig", "kid": id,
            "n": CompactJWT.base64url(primitives.modulus), "e": CompactJWT.base64url(primitives.publicExponent),
        ]
    }

    /// A self-signed certificate of the public key as PEM (Google's `oauth2/v1/certs` maps key ids to these).
    func certificatePEM(commonName: String) throws -> String {
        let name = try DistinguishedName { CommonName(commonName) }
        let now = Date()
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(key.publicKey), notValidBefore: now.addingTimeInterval(-86_400),
            notValidAfter: now.addingTimeInterval(14 * 86_400), issuer: name, subject: name, signatureAlgorithm: .sha256WithRSAEncryption,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
            },
            issuerPrivateKey: .init(key))
        return try certificate.serializeAsPEM().pemString
    }
}

/// A compact JWS split into its parts (nothing verified yet).
struct CompactJWT {
    let header: [String: Any]
    let claims: [String: Any]
    let signingInput: Data
    let signature: Data

    init?(_ token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let h = Self.data(base64url: parts[0]), let c = Self.data(base64url: parts[1]),
            let s = Self.data(base64url: parts[2]),
            let header = try? JSONSerialization.jsonObject(with: h) as? [String: Any],
            let claims = try? JSONSerialization.jsonObject(with: c) as? [String: Any]
        else { return nil }
        self.header = header
        self.claims = claims
        self.signingInput = Data("\(parts[0]).\(parts[1])".utf8)
        self.signature = s
    }

    /// A number claim (`exp`, `iat`), whether JSON wrote it as an integer or not.
    func seconds(_ claim: String) -> Int64? { (claims[claim] as? NSNumber).map { $0.int64Value } }

    static func encode(_ object: [String: Any]) throws -> String {
        base64url(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
    }

    static func base64url<D: DataProtocol>(_ bytes: D) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func data<S: StringProtocol>(base64url text: S) -> Data? {
        guard text.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else { return nil }
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        s += String(repeating: "=", count: (4 - s.count % 4) % 4)
        return Data(base64Encoded: s)
    }
}
