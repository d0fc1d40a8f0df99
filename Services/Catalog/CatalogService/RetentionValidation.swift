import Foundation
import IAPProtocol
import JSONRPC

/// Checks a subscription's retention rules before they are written: every message identifier a UUID (Apple's message
/// ids), each choice complete for its kind and nothing else, an offer one of the product's own, conditions that can hold.
public enum RetentionValidation {
    public static let maxChoices = 50
    static let billingPlanTypes: Set<String> = ["BILLED_UPFRONT", "MONTHLY"]

    /// `product`: the definition the rules belong to (its type and offers).
    public static func check(_ rules: RetentionRules, product: ProductDefinition, field: String) throws(RPCError) {
        guard product.type == .autoRenewable else {
            throw RPCError.invalidParams("only auto-renewable subscriptions have retention rules", field: field, reason: "retentionNotAllowed")
        }
        guard rules.choices.count <= maxChoices else {
            throw RPCError.invalidParams("at most \(maxChoices) retention choices a product", field: "\(field).choices", reason: "tooMany")
        }
        if let id = rules.defaultMessageIdentifier { try checkMessageId(id, field: "\(field).defaultMessageIdentifier") }
        // A customer about to cancel is subscribed: win-back and first-time offers never apply to them.
        let offers = Set((product.offers ?? []).filter { ![.lapsed, .neverSubscribed].contains($0.eligibility.kind) }.map(\.offerId))
        var seen: Set<String> = []
        for (i, choice) in rules.choices.enumerated() {
            let at = "\(field).choices[\(i)]"
            guard !choice.id.isEmpty, choice.id.utf8.count <= 64, choice.id.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
                throw RPCError.invalidParams("id must be 1-64 printable ASCII characters", field: "\(at).id", reason: "invalidValue")
            }
            guard seen.insert(choice.id).inserted else {
                throw RPCError.invalidParams("choice \(choice.id) is defined twice", field: "\(at).id", reason: "duplicateChoice")
            }
            try checkMessageId(choice.messageIdentifier, field: "\(at).messageIdentifier")
            if let locales = choice.locales {
                guard (1...100).contains(locales.count) else {
                    throw RPCError.invalidParams("locales, when given, are 1-100 locales", field: "\(at).locales", reason: "invalidValue")
                }
                for locale in locales { try ProductValidation.checkLocale(locale, field: "\(at).locales") }
            }
            try checkKind(choice, offers: offers, productId: product.productId, field: at)
            if let when = choice.when { try checkConditions(when, field: "\(at).when") }
        }
    }

    /// Each kind with exactly its own fields.
    private static func checkKind(_ choice: RetentionChoice, offers: Set<String>, productId: String, field: String) throws(RPCError) {
        func absent(_ value: String?, _ name: String) throws(RPCError) {
            guard value == nil else {
                throw RPCError.invalidParams("\(name) is not for a \(choice.kind.rawValue) choice", field: "\(field).\(name)", reason: "invalidValue")
            }
        }
        switch choice.kind {
        case .message:
            try absent(choice.alternateProductId, "alternateProductId")
            try absent(choice.billingPlanType, "billingPlanType")
            try absent(choice.offerId, "offerId")
            try absent(choice.signatureVersion, "signatureVersion")
        case .alternateProduct:
            guard let other = choice.alternateProductId, other != productId else {
                throw RPCError.invalidParams(
                    "an alternateProduct choice names another product (alternateProductId)", field: "\(field).alternateProductId",
                    reason: "invalidValue")
            }
            try ProductValidation.checkProductId(other, field: "\(field).alternateProductId")
            if let plan = choice.billingPlanType, !billingPlanTypes.contains(plan) {
                throw RPCError.invalidParams(
                    "billingPlanType is BILLED_UPFRONT or MONTHLY", field: "\(field).billingPlanType", reason: "invalidValue")
            }
            try absent(choice.offerId, "offerId")
            try absent(choice.signatureVersion, "signatureVersion")
        case .promotionalOffer:
            guard let offer = choice.offerId, offers.contains(offer) else {
                throw RPCError.invalidParams(
                    "a promotionalOffer choice names one of the product's offers (catalog.setOffers), not a lapsed or neverSubscribed one",
                    field: "\(field).offerId",
                    reason: "unknownOffer")
            }
            if let version = choice.signatureVersion, version != "v1", version != "v2" {
                throw RPCError.invalidParams("signatureVersion is v1 or v2", field: "\(field).signatureVersion", reason: "invalidValue")
            }
            try absent(choice.alternateProductId, "alternateProductId")
            try absent(choice.billingPlanType, "billingPlanType")
        }
    }

    private static func checkConditions(_ c: RetentionConditions, field: String) throws(RPCError) {
        for (name, value) in [
            ("minTenureDays", c.minTenureDays), ("maxTenureDays", c.maxTenureDays), ("minRenewals", c.minRenewals),
            ("maxRenewals", c.maxRenewals), ("maxRefunds", c.maxRefunds),
        ] {
            if let value, !(0...100_000).contains(value) {
                throw RPCError.invalidParams("\(name) is 0-100000", field: "\(field).\(name)", reason: "invalidValue")
            }
        }
        if let low = c.minTenureDays, let high = c.maxTenureDays, low > high {
            throw RPCError.invalidParams("minTenureDays is above maxTenureDays", field: "\(field).minTenureDays", reason: "invalidValue")
        }
        if let low = c.minRenewals, let high = c.maxRenewals, low > high {
            throw RPCError.invalidParams("minRenewals is above maxRenewals", field: "\(field).minRenewals", reason: "invalidValue")
        }
    }

    static func checkMessageId(_ id: String, field: String) throws(RPCError) {
        guard id.utf8.count == 36, UUID(uuidString: id) != nil else {
            throw RPCError.invalidParams("a message identifier is a UUID", field: field, reason: "invalidValue")
        }
    }
}
