import Foundation
import IAPProtocol

/// What this server knows of a subscriber about to cancel, from its own records only (a retention answer never waits on
/// Apple). `known` false: the subscription was never redeemed or notified here; no condition then holds.
public struct RetentionFacts: Sendable, Equatable {
    public var known: Bool
    public var tenureDays: Int
    public var renewals: Int
    public var refunds: Int
    public static let unknown = RetentionFacts(known: false, tenureDays: 0, renewals: 0, refunds: 0)
    public init(known: Bool, tenureDays: Int, renewals: Int, refunds: Int) {
        self.known = known
        self.tenureDays = tenureDays
        self.renewals = renewals
        self.refunds = refunds
    }
}

/// Which retention rule applies: the first, in the catalog's order, whose locale and conditions match and, for an offer,
/// that the subscriber may have (`offerRefusal` answers nil). Pure: the same for both engines and every instance.
public enum RetentionDecision {
    public struct Choice: Sendable, Equatable {
        /// Nil: no rule applies (`reason` says why); the default message, when the rules have one, is answered.
        public var choice: RetentionChoice?
        public var reason: String?
    }

    public static func choose(
        _ rules: RetentionRules, userLocale: String, facts: RetentionFacts, offerRefusal: (RetentionChoice) -> String?
    ) -> Choice {
        var skipped: [String] = []
        for choice in rules.choices {
            guard localeMatches(choice.locales, userLocale) else { continue }
            guard conditionsHold(choice.when, facts) else { continue }
            if choice.kind == .promotionalOffer, let refusal = offerRefusal(choice) {
                skipped.append("\(choice.id): \(refusal)")
                continue
            }
            return Choice(choice: choice, reason: nil)
        }
        let why = skipped.isEmpty ? "no rule matches the locale and the subscriber" : "no rule applies (\(skipped.joined(separator: "; ")))"
        return Choice(choice: nil, reason: why)
    }

    /// `en-US`, `en_US` and `EN-us` are one locale; a rule's bare language (`en`) matches each of its regions.
    public static func localeMatches(_ locales: [String]?, _ userLocale: String) -> Bool {
        guard let locales else { return true }
        let user = normalized(userLocale)
        let language = user.split(separator: "-").first.map(String.init) ?? user
        return locales.contains { rule in
            let wanted = normalized(rule)
            return wanted == user || (!wanted.contains("-") && wanted == language)
        }
    }

    public static func conditionsHold(_ c: RetentionConditions?, _ facts: RetentionFacts) -> Bool {
        guard let c else { return true }
        guard facts.known else { return false }
        if let v = c.minTenureDays, facts.tenureDays < v { return false }
        if let v = c.maxTenureDays, facts.tenureDays > v { return false }
        if let v = c.minRenewals, facts.renewals < v { return false }
        if let v = c.maxRenewals, facts.renewals > v { return false }
        if let v = c.maxRefunds, facts.refunds > v { return false }
        return true
    }

    private static func normalized(_ locale: String) -> String { locale.replacingOccurrences(of: "_", with: "-").lowercased() }
}
