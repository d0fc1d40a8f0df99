import Crypto
import CryptoExtras
import Foundation
import SwiftASN1
import X509

/// The parts of OCSP (RFC 6960) messages this suite reads and writes itself: swift-certificates checks OCSP
/// responses (its `OCSPVerifierPolicy`) but keeps its message types internal, so the revocation cache reads a
/// request's certificate id and a response's validity here, and the simulator's responder builds its answers here.
/// Reading is lenient about what it skips and strict about what it takes: anything unexpected is `nil`.
public enum OCSPMessages {
    /// `id-pkix-ocsp-basic`.
    static let basicResponseType = try! ASN1ObjectIdentifier(dotRepresentation: "1.3.6.1.5.5.7.48.1.1")
    /// `id-pkix-ocsp-nonce`.
    static let nonceExtension = try! ASN1ObjectIdentifier(dotRepresentation: "1.3.6.1.5.5.7.48.1.2")
    static let sha1 = try! ASN1ObjectIdentifier(dotRepresentation: "1.3.14.3.2.26")
    static let sha256 = try! ASN1ObjectIdentifier(dotRepresentation: "2.16.840.1.101.3.4.2.1")

    /// The certificate a request asks about (the first of its list; swift-certificates asks one at a time).
    public struct CertID: Sendable, Hashable {
        /// The CertID as encoded in the request, echoed in the response.
        public let der: [UInt8]
        public let hashAlgorithm: ASN1ObjectIdentifier
        public let issuerNameHash: [UInt8]
        public let issuerKeyHash: [UInt8]
        /// The serial number's content bytes (big-endian, as encoded).
        public let serialNumber: [UInt8]

        /// Whether `issuer` is the issuer this id names (its subject's and key's hashes).
        public func isIssued(by issuer: Certificate) -> Bool {
            var serializer = DER.Serializer()
            guard (try? serializer.serialize(issuer.subject)) != nil else { return false }
            let name = serializer.serializedBytes
            let key = Array(issuer.publicKey.subjectPublicKeyInfoBytes)
            switch hashAlgorithm {
            case OCSPMessages.sha1:
                return Array(Insecure.SHA1.hash(data: name)) == issuerNameHash && Array(Insecure.SHA1.hash(data: key)) == issuerKeyHash
            case OCSPMessages.sha256:
                return Array(SHA256.hash(data: name)) == issuerNameHash && Array(SHA256.hash(data: key)) == issuerKeyHash
            default:
                return false
            }
        }
    }

    /// OCSPRequest { tbsRequest { [0] version?, [1] requestorName?, requestList { Request { reqCert, ... } } ... } }.
    public static func certID(inRequest bytes: [UInt8]) -> CertID? {
        guard let request = try? DER.parse(bytes), let tbs = children(request)?.first, let tbsParts = children(tbs),
            let list = tbsParts.first(where: { $0.identifier == .sequence }), let first = children(list)?.first,
            let certID = children(first)?.first, let parts = children(certID), parts.count == 4,
            let algorithm = children(parts[0])?.first, let oid = try? ASN1ObjectIdentifier(derEncoded: algorithm),
            case .primitive(let nameHash) = parts[1].content, case .primitive(let keyHash) = parts[2].content,
            parts[3].identifier == .integer, case .primitive(let serial) = parts[3].content
        else { return nil }
        return CertID(
            der: Array(certID.encodedBytes), hashAlgorithm: oid, issuerNameHash: Array(nameHash), issuerKeyHash: Array(keyHash),
            serialNumber: Array(serial))
    }

    public enum CertStatus: String, Sendable {
        case good, revoked, unknown
    }

    /// What a response says, unverified: the revocation cache keeps a response until `nextUpdate`, and reports a
    /// revoked status in its own words. (Whether the response is genuine is swift-certificates' check.)
    public struct ResponseSummary: Sendable {
        public let status: CertStatus
        public let thisUpdate: Date
        public let nextUpdate: Date?
        /// A response echoing the request's nonce answers that request only: never cached.
        public let hasNonce: Bool
    }

    /// OCSPResponse { status, [0] { ResponseBytes { type, OCTET STRING BasicOCSPResponse } } }; nil unless the
    /// status is successful and the response is a basic one.
    public static func summary(ofResponse bytes: [UInt8]) -> ResponseSummary? {
        guard let response = try? DER.parse(bytes), let parts = children(response), parts.count == 2,
            parts[0].identifier == .enumerated, case .primitive(let responseStatus) = parts[0].content, responseStatus == [0],
            let responseBytes = children(parts[1])?.first, let typed = children(responseBytes), typed.count == 2,
            (try? ASN1ObjectIdentifier(derEncoded: typed[0])) == basicResponseType,
            case .primitive(let basicBytes) = typed[1].content,
            let basic = try? DER.parse(basicBytes), let data = children(basic)?.first, let fields = children(data)
        else { return nil }
        // ResponseData { [0] version?, responderID, producedAt, responses, [1] extensions? }
        guard let responses = fields.first(where: { $0.identifier == .sequence }), let single = children(responses)?.first,
            let singleParts = children(single), singleParts.count >= 3
        else { return nil }
        let status: CertStatus
        switch (singleParts[1].identifier.tagClass, singleParts[1].identifier.tagNumber) {
        case (.contextSpecific, 0): status = .good
        case (.contextSpecific, 1): status = .revoked
        case (.contextSpecific, 2): status = .unknown
        default: return nil
        }
        guard let thisUpdate = date(singleParts[2]) else { return nil }
        var nextUpdate: Date?
        if singleParts.count > 3, singleParts[3].identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific),
            let inner = children(singleParts[3])?.first
        {
            nextUpdate = date(inner)
        }
        var hasNonce = false
        if let extensions = fields.first(where: { $0.identifier == ASN1Identifier(tagWithNumber: 1, tagClass: .contextSpecific) }) {
            hasNonce = extensions.encodedBytes.containsSubsequence(nonceExtension)
        }
        return ResponseSummary(status: status, thisUpdate: thisUpdate, nextUpdate: nextUpdate, hasNonce: hasNonce)
    }

    // MARK: Building responses (the simulator's responder)

    /// How a responder signs: the issuer's key (responses are signed by the issuer of the certificate asked about,
    /// the simplest authorised responder of RFC 6960 section 4.2.2.2, named `byKey` as Apple's responders name
    /// theirs: Apple's libraries read no other form).
    public enum SigningKey: Sendable {
        case p256(P256.Signing.PrivateKey)
        case rsa(_RSA.Signing.PrivateKey)
    }

    /// A successful basic response about `certID`.
    public static func response(
        certID: CertID, status: CertStatus, revokedAt: Date? = nil, producedAt: Date, thisUpdate: Date, nextUpdate: Date,
        responder: Certificate, key: SigningKey
    ) throws -> [UInt8] {
        // ResponderID byKey [2]: the SHA-1 of the responder's subjectPublicKey, as in its Subject Key Identifier.
        let keyHash = SubjectKeyIdentifier(hash: responder.publicKey).keyIdentifier
        var data = DER.Serializer()
        try data.appendConstructedNode(identifier: .sequence) { tbs in
            try tbs.serialize(explicitlyTaggedWithTagNumber: 2, tagClass: .contextSpecific) {
                try $0.serialize(ASN1OctetString(contentBytes: keyHash))
            }
            try tbs.serialize(try generalizedTime(producedAt))
            try tbs.appendConstructedNode(identifier: .sequence) { responses in
                try responses.appendConstructedNode(identifier: .sequence) { single in
                    single.serializeRawBytes(certID.der)
                    switch status {
                    case .good:
                        single.appendPrimitiveNode(identifier: ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific)) { _ in }
                    case .revoked:
                        try single.appendConstructedNode(identifier: ASN1Identifier(tagWithNumber: 1, tagClass: .contextSpecific)) {
                            try $0.serialize(try generalizedTime(revokedAt ?? thisUpdate))
                        }
                    case .unknown:
                        single.appendPrimitiveNode(identifier: ASN1Identifier(tagWithNumber: 2, tagClass: .contextSpecific)) { _ in }
                    }
                    try single.serialize(try generalizedTime(thisUpdate))
                    try single.serialize(try generalizedTime(nextUpdate), explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific)
                }
            }
        }
        let tbsBytes = data.serializedBytes
        let algorithm: ASN1ObjectIdentifier
        let signature: [UInt8]
        switch key {
        case .p256(let key):
            algorithm = try ASN1ObjectIdentifier(dotRepresentation: "1.2.840.10045.4.3.2")
            signature = Array(try key.signature(for: SHA256.hash(data: tbsBytes)).derRepresentation)
        case .rsa(let key):
            algorithm = try ASN1ObjectIdentifier(dotRepresentation: "1.2.840.113549.1.1.11")
            signature = Array(try key.signature(for: SHA256.hash(data: tbsBytes), padding: .insecurePKCS1v1_5).rawRepresentation)
        }
        var basic = DER.Serializer()
        try basic.appendConstructedNode(identifier: .sequence) { b in
            b.serializeRawBytes(tbsBytes)
            try b.appendConstructedNode(identifier: .sequence) { identifier in
                try identifier.serialize(algorithm)
                if case .rsa = key { try identifier.serialize(ASN1Null()) }
            }
            try b.serialize(ASN1BitString(bytes: signature[...]))
        }
        var out = DER.Serializer()
        try out.appendConstructedNode(identifier: .sequence) { r in
            r.appendPrimitiveNode(identifier: .enumerated) { $0.append(0) }
            try r.serialize(explicitlyTaggedWithTagNumber: 0, tagClass: .contextSpecific) { explicit in
                try explicit.appendConstructedNode(identifier: .sequence) { rb in
                    try rb.serialize(basicResponseType)
                    try rb.serialize(ASN1OctetString(contentBytes: basic.serializedBytes[...]))
                }
            }
        }
        return out.serializedBytes
    }

    /// An unsuccessful response: 1 malformedRequest, 2 internalError, 3 tryLater, 6 unauthorized.
    public static func failure(status: UInt8) -> [UInt8] {
        [0x30, 0x03, 0x0A, 0x01, status]
    }

    // MARK: DER helpers

    private static func children(_ node: ASN1Node) -> [ASN1Node]? {
        guard case .constructed(let nodes) = node.content else { return nil }
        return Array(nodes)
    }

    private static let utc: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()

    private static func date(_ node: ASN1Node) -> Date? {
        guard let time = try? GeneralizedTime(derEncoded: node) else { return nil }
        let components = DateComponents(
            year: time.year, month: time.month, day: time.day, hour: time.hours, minute: time.minutes, second: time.seconds)
        return utc.date(from: components)
    }

    static func generalizedTime(_ date: Date) throws -> GeneralizedTime {
        let c = utc.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        return try GeneralizedTime(
            year: c.year!, month: c.month!, day: c.day!, hours: c.hour!, minutes: c.minute!, seconds: c.second!, fractionalSeconds: 0)
    }
}

extension ArraySlice where Element == UInt8 {
    /// Whether the DER encoding of `oid` appears in these bytes.
    fileprivate func containsSubsequence(_ oid: ASN1ObjectIdentifier) -> Bool {
        var serializer = DER.Serializer()
        guard (try? serializer.serialize(oid)) != nil else { return false }
        let needle = serializer.serializedBytes
        guard needle.count <= count else { return false }
        var i = startIndex
        while i + needle.count <= endIndex {
            if self[i..<(i + needle.count)].elementsEqual(needle) { return true }
            i += 1
        }
        return false
    }
}
